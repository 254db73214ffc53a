// DEPTHWISE_CONV_2D, general: any kernel size, stride, dilation, padding and depth multiplier. A tile is XT
// adjacent output columns of one output slice (TILE); weights are one vec4 per (out_slice, ky, kx).
${BINDINGS}

${LOAD}

#include "store_fn.wgsl"

#include "tile_main.wgsl"
  ${TILE}
  ${ACC_INIT}
  for (var ky = 0u; ky < ${KH}u; ky++) {
    let iy = i32(oy * ${SH}u + ky * ${DH}u) - ${PT};
    if (iy < 0 || iy >= ${IH}) { continue; }
    for (var kx = 0u; kx < ${KW}u; kx++) {
      let ix0 = i32(ox0 * ${SW}u + kx * ${DW}u) - ${PL};
      ${COLS}
      let w = S4(weights[(os0 * ${KH}u + ky) * ${KW}u + kx]);
      ${TAPS}
    }
  }
  if (tile < ${TILES}u) {
    ${STORE}
  }
}
