// DEPTHWISE_CONV_2D 3x3, dilation 1, stride 1 or 2, multiplier 1: fully unrolled. A tile is XT adjacent output
// columns of one slice (TILE); every input column of the window is loaded once and reused.
${BINDINGS}

#include "store_fn.wgsl"

#include "tile_main.wgsl"
  ${TILE}
  let iy_base = i32(oy * ${SH}u) - ${PT};
  let ix_base = i32(ox0 * ${SW}u) - ${PL};
  let base = (ob * ${SI}u + os0) * ${PLANE}u;
  ${ACC_INIT}
  ${TAPS}
  if (tile < ${TILES}u) {
    ${STORE}
  }
}
