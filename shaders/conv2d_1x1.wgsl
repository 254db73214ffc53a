// CONV_2D 1x1, stride 1, no padding: a GEMM over the H*W pixels of each batch. A tile is XT consecutive pixels x
// ST output slices (TILE gives its first pixel p0, slice os0 and batch ob); its SPLIT invocations take every
// SPLIT-th input slice from slice k on and add up their sums (REDUCE). Weights are mat4x4 blocks
// [out_slice][in_slice].
${BINDINGS}

#include "store_fn.wgsl"

${LANE_MEMORY}

#include "tile_main.wgsl"
  ${TILE}
  ${PIX}
  ${ACC_INIT}
  var wi = os0 * ${SI}u + k;
  var si = (ob * ${SI}u + k) * ${PLANE}u;
  #include "conv/slices.wgsl"
#include "split_store.wgsl"
