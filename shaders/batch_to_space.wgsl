// BATCH_TO_SPACE_ND: out[b, y, x] = in[(dy * BW + dx) * B + b, Y / BH, X / BW] with Y = y + TOP, X = x + LEFT,
// dy = Y % BH, dx = X % BW (crops skip the first TOP rows / LEFT columns). One PHWC4 vec4 per invocation.
${BINDINGS}

#include "element_main.wgsl"
  let y = oy + ${TOP}u;
  let x = ox + ${LEFT}u;
  let ib = ((y % ${BH}u) * ${BW}u + x % ${BW}u) * ${B}u + ob;
  var value = vec4<f32>(src[((ib * ${S}u + os) * ${IH}u + y / ${BH}u) * ${IW}u + x / ${BW}u]);
  ${EPILOGUE}
  dst[oi] = D4(value);
}
