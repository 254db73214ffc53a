// FULLY_CONNECTED with one row (GEMV): one workgroup of ${WG_X} invocations per output slice. Invocations split
// the K = SI*P weight blocks (adjacent invocations read adjacent blocks), then reduce in workgroup memory.
${BINDINGS}

${SRC_INDEX}

fn store(v: vec4<f32>, r: u32, os: u32) {
${STORE}
  var value = v;
  ${EPILOGUE}
  dst[oi] = value;
}

var<workgroup> part: array<vec4<f32>, ${WG_X}>;

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>) {
  // The grid is exactly SO workgroups: no early return (barriers below need uniform control flow).
  let os = wid.x;
  var acc = vec4<f32>(0.0);
  for (var k = lid.x; k < ${K}u; k += ${WG_X}u) {
    acc += weights[os * ${K}u + k] * src[src_index(k % ${P}u, k / ${P}u)];
  }
  part[lid.x] = acc;
  workgroupBarrier();
  for (var n = ${WG_X}u / 2u; n > 0u; n = n / 2u) {
    if (lid.x < n) { part[lid.x] += part[lid.x + n]; }
    workgroupBarrier();
  }
  if (lid.x == 0u && gid.x < ${GRID_X}) { store(part[0] + bias[os], 0u, os); }
}
