// MediaPipe Landmarks2TransformMatrix (version 2), one invocation: landmark i is src[i] = (x, y, z, 0) of batch 0.
// The rotation r turns the line from the left to the right rotation landmark to the target angle; the subset,
// rotated by R(r), gives a box whose centre (rotated back) and size define the crop. The output is the 4x4
// matrix Shift(centre) * R(-r) * Scale(scale * size / output size) * Shift(-output size / 2), one row per vec4.
${BINDINGS}

#include "store_fn.wgsl"

fn landmark(i: u32) -> vec2<f32> {
  return vec4<f32>(src[i]).xy;
}

fn rotated(p: vec2<f32>, c: f32, s: f32) -> vec2<f32> {
  return vec2<f32>(c * p.x - s * p.y, s * p.x + c * p.y);
}

#include "grid_main.wgsl"
  let left = landmark(${LEFT}u);
  let right = landmark(${RIGHT}u);
  let r = ${TARGET} - atan2(right.y - left.y, right.x - left.x);
  let c = cos(r);
  let s = sin(r);
  var lo = rotated(landmark(subset[0]), c, s);
  var hi = lo;
  for (var i = 1u; i < ${COUNT}u; i++) {
    let q = rotated(landmark(subset[i]), c, s);
    lo = min(lo, q);
    hi = max(hi, q);
  }
  let mid = (lo + hi) / 2.0;
  let centre = vec2<f32>(c * mid.x + s * mid.y, -s * mid.x + c * mid.y);  // R(-r) * mid
  let sx = ${SCALE_X} * (hi.x - lo.x) / ${OUT_W};
  let sy = ${SCALE_Y} * (hi.y - lo.y) / ${OUT_H};
  store(vec4<f32>(c * sx, s * sy, 0.0, c * sx * ${SHIFT_X} + s * sy * ${SHIFT_Y} + centre.x), 0u, 0u, 0u, 0u);
  store(vec4<f32>(-s * sx, c * sy, 0.0, -s * sx * ${SHIFT_X} + c * sy * ${SHIFT_Y} + centre.y), 0u, 0u, 1u, 0u);
  store(vec4<f32>(0.0, 0.0, 1.0, 0.0), 0u, 0u, 2u, 0u);
  store(vec4<f32>(0.0, 0.0, 0.0, 1.0), 0u, 0u, 3u, 0u);
}
