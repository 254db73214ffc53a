// SPACE_TO_BATCH_ND: out[(dy * BW + dx) * B + b, y, x] = in[b, y * BH + dy - TOP, x * BW + dx - LEFT], zero
// where that falls in the padding. One PHWC4 vec4 per invocation (channels do not move).
${BINDINGS}

#include "element_main.wgsl"
  let b = ob % ${B}u;
  let blk = ob / ${B}u;
  let iy = i32(oy * ${BH}u + blk / ${BW}u) - ${TOP};
  let ix = i32(ox * ${BW}u + blk % ${BW}u) - ${LEFT};
  var value = vec4<f32>(0.0);
  if (iy >= 0 && iy < ${IH} && ix >= 0 && ix < ${IW}) {
    value = vec4<f32>(src[((b * ${S}u + os) * ${IH}u + u32(iy)) * ${IW}u + u32(ix)]);
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
