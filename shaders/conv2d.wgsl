// CONV_2D, general: any kernel size, stride, dilation and padding. A tile is XT adjacent output columns of row
// oy x ST output slices (TILE); its SPLIT invocations take every SPLIT-th input slice from slice k on and add up
// their sums (REDUCE). Weights are mat4x4 blocks [out_slice][ky][kx][in_slice]: a tap is `acc += w * src`.
// Reads outside the input (padding) are zero; PT/PL may be any non-negative padding.
${BINDINGS}

#include "store_fn.wgsl"

${LANE_MEMORY}

#include "tile_main.wgsl"
  ${TILE}
  ${ACC_INIT}
  #include "conv/window.wgsl"
      var wi = ((os0 * ${KH}u + ky) * ${KW}u + kx) * ${SI}u + k;
      var si = ((ob * ${SI}u + k) * ${IH}u + u32(iy)) * ${IW}u;
      #include "conv/slices.wgsl"
    }
  }
#include "split_store.wgsl"
