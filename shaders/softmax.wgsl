// SOFTMAX / LOG_SOFTMAX / L2_NORMALIZATION over the channel (last) axis: a tile is one pixel and its ${S} slices
// (max pass, sum pass, write pass); its SPLIT invocations take every SPLIT-th slice from slice k on and combine
// the max and the sum (REDUCE_MAX, REDUCE_SUM). Padding lanes of the last slice are masked out of the max and
// the sum and written as zeros. The per-op math is baked: SUM_TERM(v, mx), ACCUMULATE(t) into acc (per lane, or
// for int8 SOFTMAX in channel order into acc.x, as LiteRT sums), PREPARE(total), OUT(v).
${BINDINGS}

${LANE_MEMORY}

#include "row_main.wgsl"
  var m = vec4<f32>(${LOWEST});
  ${MAX_PASS}
  let mx = max(max(m.x, m.y), max(m.z, m.w));
  var acc = vec4<f32>(0.0);
  for (var s = k; s < ${S}u; s += ${SPLIT}u) {
    let v = vec4<f32>(src[base + s * plane]);
    var t = ${SUM_TERM};
    if (s == ${S}u - 1u) { t = select(vec4<f32>(0.0), t, last_mask); }
    ${ACCUMULATE}
  }
  ${REDUCE_SUM}
  let total = acc.x + acc.y + acc.z + acc.w;
  ${PREPARE}
  if (tile < ${TILES}u) {
    for (var os = k; os < ${S}u; os += ${SPLIT}u) {
      let oi = base + os * plane;
      let v = vec4<f32>(src[oi]);
      var value = ${OUT};
      ${EPILOGUE}
      dst[oi] = D4(value);
    }
  }
}
