// Workgroup-parallel reduction for large extents (e.g. global average pooling): one workgroup of ${T} threads
// per PHWC4 output vec4. Each thread combines a strided share of q in [0, R), then a shared-memory tree
// combines the partials. Bounds are checked on workgroup_id so every barrier stays in uniform control flow.
${BINDINGS}

${FUNCS}

var<workgroup> partial: array<vec4<f32>, ${T}>;

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  if (wid.x * ${T}u >= ${GRID_X} || wid.y >= ${GRID_Y} || wid.z >= ${GRID_Z}) { return; }
  let ox = wid.x;
  let oy = wid.y;
  let os = wid.z % ${S}u;
  let ob = wid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  var acc = ${INIT};
  for (var q = lid; q < ${R}u; q += ${T}u) {
    acc = combine(acc, load(ob, oy, ox, os, q));
  }
  partial[lid] = acc;
  workgroupBarrier();
  for (var step = ${T}u / 2u; step > 0u; step = step / 2u) {
    if (lid < step) {
      partial[lid] = combine(partial[lid], partial[lid + step]);
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    acc = partial[0];
    var value = ${FINISH};
    ${EPILOGUE}
    dst[oi] = value;
  }
}
