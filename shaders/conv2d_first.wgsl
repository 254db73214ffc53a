// CONV_2D with one input slice (1..4 input channels, typical first layers): every tap is unrolled; each input
// vec4 feeds a tile of XT output columns x ST output slices (TILE). Weights are mat4x4 blocks [out_slice][ky][kx].
${BINDINGS}

#include "store_fn.wgsl"

#include "tile_main.wgsl"
  ${TILE}
  let iy0 = i32(oy * ${SH}u) - ${PT};
  let ix0 = i32(ox0 * ${SW}u) - ${PL};
  let base = ob * ${IH}u * ${IW}u;
  let wi = os0 * ${KH}u * ${KW}u;
  ${ACC_INIT}
  ${TAPS}
  if (tile < ${TILES}u) {
    ${STORE}
  }
}
