// MediaPipe TransformTensorBilinear: one PHWC4 output vec4 per invocation (batch 0). Rows 0 and 1 of the 4x4
// matrix (mat[0], mat[1]) map the output pixel (x, y, 0, 1) to a sample point of the input; outside
// [0, W-1] x [0, H-1] it gives 0, inside it is bilinear over the four neighbours (neighbours outside read 0).
${BINDINGS}

fn texel(s: u32, y: i32, x: i32) -> vec4<f32> {
  if (y < 0 || x < 0 || y >= ${IH} || x >= ${IW}) { return vec4<f32>(0.0); }
  return vec4<f32>(src[(s * ${IH}u + u32(y)) * ${IW}u + u32(x)]);
}

#include "batch0_main.wgsl"
  var xt = vec4<f32>(mat[0]);
  var yt = vec4<f32>(mat[1]);
  ${CORRECT}
  let coord = vec4<f32>(f32(ox), f32(oy), 0.0, 1.0);
  let tc = vec2<f32>(dot(xt, coord), dot(yt, coord));
  var value = vec4<f32>(0.0);
  if (!(tc.x < 0.0 || tc.x > f32(${IW} - 1) || tc.y < 0.0 || tc.y > f32(${IH} - 1))) {
    let f = floor(tc);
    let x0 = i32(f.x);
    let y0 = i32(f.y);
    let right = tc.x - f.x;
    let lower = tc.y - f.y;
    let top = (1.0 - right) * texel(os, y0, x0) + right * texel(os, y0, x0 + 1);
    let bottom = (1.0 - right) * texel(os, y0 + 1, x0) + right * texel(os, y0 + 1, x0 + 1);
    value = lower * bottom + (1.0 - lower) * top;
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
