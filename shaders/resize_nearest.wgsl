// RESIZE_NEAREST_NEIGHBOR: one PHWC4 output vec4 per invocation, copied from the source pixel whose row
// (column) index the host computed into tab[y].x (tab[H + x].x) with TFLite's float32 rounding.
${BINDINGS}

#include "element_main.wgsl"
  let iy = u32(tab[oy].x);
  let ix = u32(tab[${H}u + ox].x);
  var value = vec4<f32>(src[((ob * ${S}u + os) * ${IH}u + iy) * ${IW}u + ix]);
  ${EPILOGUE}
  dst[oi] = D4(value);
}
