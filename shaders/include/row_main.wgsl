// The head of main in kernels whose tile is one pixel (a row of the channel axis) and its S slices, split over
// SPLIT invocations (normalization, softmax): the pixel (ob, oy, ox), its first vec4 `base`, the slice stride
// `plane`, and `last_mask`, the lanes of the last slice that hold channels.
#include "tile_main.wgsl"
  let ox = tile % ${W}u;
  let oy = tile / ${W}u % ${H}u;
  let ob = min(tile / ${W}u / ${H}u, ${BATCH_LAST}u);
  let plane = ${H}u * ${W}u;
  let base = ob * ${S}u * plane + oy * ${W}u + ox;
  let last_mask = ${LAST_MASK};
