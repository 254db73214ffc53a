// LAYER_NORM / RMS_NORM over the channel (last) axis: a tile is one pixel (row) and its ${S} slices. Pass 1 sums
// the row (RMS: its squares) for the mean; LayerNorm's pass 2 sums the squared deviations from that mean (two
// passes: no cancellation when the mean is large); the write pass normalizes, scales and offsets. The SPLIT
// invocations of a tile take every SPLIT-th slice from slice k on and combine their f32 sums. Padding lanes of the
// last slice are masked out of the sums and written as zeros.
${BINDINGS}

${LANE_MEMORY}

#include "row_main.wgsl"
  var acc = vec4<f32>(0.0);
  for (var s = k; s < ${S}u; s += ${SPLIT}u) {
    var v = vec4<f32>(src[base + s * plane]);
    if (s == ${S}u - 1u) { v = select(vec4<f32>(0.0), v, last_mask); }
    acc += ${FIRST_TERM};
  }
  ${REDUCE_FIRST}
  let first = (acc.x + acc.y + acc.z + acc.w) / ${C_F};
  ${SECOND_PASS}
  let inv = ${INV};
  if (tile < ${TILES}u) {
    for (var os = k; os < ${S}u; os += ${SPLIT}u) {
      let oi = base + os * plane;
      let v = vec4<f32>(src[oi]);
      var value = (v - vec4<f32>(mean)) * inv * scale[os] + offset[os];
      ${EPILOGUE}
      dst[oi] = D4(value);
    }
  }
}
