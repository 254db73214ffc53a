// DEPTHWISE_CONV_2D, general: any kernel size, stride, dilation, padding and depth multiplier. A tile is XT
// adjacent output columns of one output slice (TILE); weights are one vec4 per (out_slice, ky, kx).
${BINDINGS}

${LOAD}

#include "store_fn.wgsl"

#include "tile_main.wgsl"
  ${TILE}
  ${ACC_INIT}
  #include "conv/window.wgsl"
      let w = S4(weights[(os0 * ${KH}u + ky) * ${KW}u + kx]);
      ${TAPS}
    }
  }
  if (tile < ${TILES}u) {
    ${STORE}
  }
}
