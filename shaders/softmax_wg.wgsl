// SOFTMAX / LOG_SOFTMAX / L2_NORMALIZATION over many channels (e.g. 1000 classes): one workgroup of ${T}
// threads per pixel; threads stride over the ${S} slices, partial max and sum are combined in shared memory.
// Bounds are checked on workgroup_id so the barriers stay in uniform control flow.
${BINDINGS}

var<workgroup> red: array<f32, ${T}>;

fn tree_max(lid: u32) {
  for (var step = ${T}u / 2u; step > 0u; step = step / 2u) {
    if (lid < step) { red[lid] = max(red[lid], red[lid + step]); }
    workgroupBarrier();
  }
}

fn tree_sum(lid: u32) {
  for (var step = ${T}u / 2u; step > 0u; step = step / 2u) {
    if (lid < step) { red[lid] = red[lid] + red[lid + step]; }
    workgroupBarrier();
  }
}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  if (wid.x * ${T}u >= ${GRID_X} || wid.y >= ${GRID_Y} || wid.z >= ${GRID_Z}) { return; }
  let ox = wid.x;
  let oy = wid.y;
  let ob = wid.z;
  let plane = ${H}u * ${W}u;
  let base = ob * ${S}u * plane + oy * ${W}u + ox;
  let last_mask = ${LAST_MASK};
  var m = vec4<f32>(${LOWEST});
  for (var s = lid; s < ${S}u; s += ${T}u) {
    var v = src[base + s * plane];
    if (s == ${S}u - 1u) { v = select(vec4<f32>(${LOWEST}), v, last_mask); }
    m = max(m, v);
  }
  red[lid] = max(max(m.x, m.y), max(m.z, m.w));
  workgroupBarrier();
  tree_max(lid);
  let mx = red[0];
  workgroupBarrier();
  var acc = vec4<f32>(0.0);
  for (var s = lid; s < ${S}u; s += ${T}u) {
    let v = src[base + s * plane];
    var t = ${SUM_TERM};
    if (s == ${S}u - 1u) { t = select(vec4<f32>(0.0), t, last_mask); }
    acc += t;
  }
  red[lid] = acc.x + acc.y + acc.z + acc.w;
  workgroupBarrier();
  tree_sum(lid);
  let total = red[0];
  ${PREPARE}
  for (var os = lid; os < ${S}u; os += ${T}u) {
    let oi = base + os * plane;
    let v = src[oi];
    var value = ${OUT};
    ${EPILOGUE}
    dst[oi] = value;
  }
}
