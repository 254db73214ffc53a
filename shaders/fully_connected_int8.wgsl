// Hybrid FULLY_CONNECTED: float rows x int8 weights packed 4 per u32 (one row of K words per output channel,
// read by weights_word). Integer arithmetic (as LiteRT's XNNPACK computes it): each input row is quantized to
// int8 with its own scale and zero point from the row's range (ROW_RANGES), the products are summed in i32
// (dot4I8Packed), and the sum is scaled back by the row's and the channel's scales. Float arithmetic: ROW_RANGES
// is empty, the weights are unpacked in registers and multiply the float rows, f32 sums scaled by the channel's
// scale. A tile is RT rows x ST output slices; its SPLIT invocations take every SPLIT-th word, first to find the
// rows' ranges (integer arithmetic), then for the dot products, and combine both. Rows of whole vec4<u32>s are
// read 4 words at a time (weights_quad; q then counts those, TAPS loops over their words).
${BINDINGS}

#include "fully_connected/store.wgsl"

fn lanes_min_negmax(x: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(min(min(x.x, x.y), min(x.z, x.w)), -max(max(x.x, x.y), max(x.z, x.w)), 0.0, 0.0);
}

${LANE_MEMORY}

#include "fully_connected/main.wgsl"
  ${ROW_RANGES}
  ${ACC_INIT}
  for (var q = k; q < ${K}u; q += ${SPLIT}u) {
    ${TAPS}
  }
  ${TO_FLOAT}
#include "split_store.wgsl"
