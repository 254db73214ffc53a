// MediaPipe TransformLandmarks: one PHWC4 output vec4 per invocation (batch 0). Channel c of a pixel is
// component c % D of the landmark starting at channel c - c % D: x and y become dot(row 0 or 1 of the 4x4
// matrix, (x, y, 0, 1)), with the translation (row[3]) times SCALE; z passes through.
${BINDINGS}

fn channel(y: u32, x: u32, c: u32) -> f32 {
  return f32(src[((c / 4u) * ${H}u + y) * ${W}u + x][c % 4u]);
}

#include "batch0_main.wgsl"
  var xt = vec4<f32>(mat[0]);
  var yt = vec4<f32>(mat[1]);
  xt.w = xt.w * ${SCALE};
  yt.w = yt.w * ${SCALE};
  var value = vec4<f32>(0.0);
  for (var k = 0u; k < 4u; k++) {
    let c = os * 4u + k;
    if (c >= ${C}u) { break; }
    let component = c % ${D}u;
    let base = c - component;
    let lv = vec4<f32>(channel(oy, ox, base), channel(oy, ox, base + 1u), 0.0, 1.0);
    if (component == 0u) {
      value[k] = dot(xt, lv);
    } else if (component == 1u) {
      value[k] = dot(yt, lv);
    } else {
      value[k] = channel(oy, ox, c);
    }
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
