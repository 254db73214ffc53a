// FULLY_CONNECTED's `store(v, r, os)`: output row r (flattened b, y, x of the OUT_ROWS rows) and slice os of
// OUT_SLICES, bounds-checked, located in the PHWC4 output (OUT_H x OUT_W pixels, OUT_PLANE of them) and written.
// SRC_INDEX is `src_index(q, sl)`'s expression: the vec4 index of input pixel q (flattened b, y, x) in slice sl.
fn src_index(q: u32, sl: u32) -> u32 { return ${SRC_INDEX}; }

${WEIGHTS_FN}

fn store(v: vec4<f32>, r: u32, os: u32) {
  if (r >= ${OUT_ROWS}u || os >= ${OUT_SLICES}u) { return; }
  let ob = r / ${OUT_PLANE}u;
  let oy = r % ${OUT_PLANE}u / ${OUT_W}u;
  let ox = r % ${OUT_W}u;
  let oi = ((ob * ${OUT_SLICES}u + os) * ${OUT_H}u + oy) * ${OUT_W}u + ox;
#include "store_value.wgsl"
