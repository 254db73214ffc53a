// ATTENTION, flash-decoding's second dispatch: one invocation per (row, output slice) merges the row's per-chunk
// softmax states that attention_partials wrote (rescaled to their common maximum) and stores the slice.
${BINDINGS}

fn store(v: vec4<f32>, i0: u32, i1: u32, m: u32, ns: u32) {
  ${LOCATE}
#include "store_value.wgsl"

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x;
  if (t >= ${TILES}u) {
    return;
  }
  let s = t % ${VS}u;
  let row = t / ${VS}u;
  let chunks = clamp(u32(partials[0].x), 1u, ${MAX_CHUNKS}u);
  var top = ${LOWEST};
  for (var c = 0u; c < chunks; c++) {
    top = max(top, partials[1u + (row * chunks + c) * ${STATE}u].x);
  }
  var total = 0.0;
  var acc = vec4<f32>(0.0);
  for (var c = 0u; c < chunks; c++) {
    let base = 1u + (row * chunks + c) * ${STATE}u;
    let state = partials[base];
    let w = exp(state.x - top);
    total += state.y * w;
    acc += partials[base + 1u + s] * w;
  }
  let m = row % ${M}u;
  let bi = row / ${M}u;
  store(acc / total, bi / ${B1}u, bi % ${B1}u, m, s);
}
