// Window pooling (AVERAGE_POOL_2D, MAX_POOL_2D, MediaPipe's MaxPoolingWithArgmax2D): one PHWC4 output vec4
// per invocation. The window is clamped to the input (implicit padding PAD_T/PAD_L never contributes; the
// average divides by the count of valid elements). The kernel module supplies the statements that declare
// the accumulator, fold each input `v` (window offset fy, fx) into it, and set `value` from it.
${BINDINGS}

#include "element_main.wgsl"
  let y0 = i32(oy) * ${STRIDE_H} - ${PAD_T};
  let x0 = i32(ox) * ${STRIDE_W} - ${PAD_L};
  let fy0 = max(0, -y0);
  let fy1 = min(${FH}, ${IN_H} - y0);
  let fx0 = max(0, -x0);
  let fx1 = min(${FW}, ${IN_W} - x0);
  let base = (ob * ${S}u + os) * ${IN_H}u;
  ${INIT}
  for (var fy = fy0; fy < fy1; fy++) {
    let row = (base + u32(y0 + fy)) * ${IN_W}u;
    for (var fx = fx0; fx < fx1; fx++) {
      let v = vec4<f32>(src[row + u32(x0 + fx)]);
      ${ACCUMULATE}
    }
  }
  let count = f32((fy1 - fy0) * (fx1 - fx0));
  ${FINISH}
  ${EPILOGUE}
  dst[oi] = D4(value);
}
