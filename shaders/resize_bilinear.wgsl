// RESIZE_BILINEAR: one PHWC4 output vec4 per invocation. tab[y] (then tab[H + x]) holds the host-computed
// (lower, upper, frac, 1 - frac) source coordinates of output row y (column x), TFLite's float32 values.
${BINDINGS}

fn src_at(b: u32, s: u32, y: u32, x: u32) -> vec4<f32> {
  return vec4<f32>(src[((b * ${S}u + s) * ${IH}u + y) * ${IW}u + x]);
}

#include "element_main.wgsl"
  let ty = tab[oy];
  let tx = tab[${H}u + ox];
  let y0 = u32(ty.x);
  let y1 = u32(ty.y);
  let x0 = u32(tx.x);
  let x1 = u32(tx.y);
  var value = src_at(ob, os, y0, x0) * ty.w * tx.w + src_at(ob, os, y1, x0) * ty.z * tx.w
            + src_at(ob, os, y0, x1) * ty.w * tx.z + src_at(ob, os, y1, x1) * ty.z * tx.z;
  ${EPILOGUE}
  dst[oi] = D4(value);
}
