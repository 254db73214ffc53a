// Reductions (MEAN, SUM, REDUCE_MAX/MIN/PROD): a tile is one PHWC4 output vec4, combining load(..., q) over the
// flattened reduced index space q in [0, R); its SPLIT invocations take every SPLIT-th q from q = k on and
// combine their partial results (REDUCE). `load` and `combine` are generated per op: they bake the rank mapping,
// the reduced axes and the channel-padding mask.
${BINDINGS}

${FUNCS}

${LANE_MEMORY}

#include "tile_main.wgsl"
  let ox = tile % ${W}u;
  let oy = tile / ${W}u % ${H}u;
  let os = tile / ${OUT_PLANE}u % ${S}u;
  let ob = min(tile / ${OUT_PLANE}u / ${S}u, ${OUT_LAST}u);
  var acc = ${INIT};
  for (var q = k; q < ${R}u; q += ${SPLIT}u) {
    acc = combine(acc, load(ob, oy, ox, os, q));
  }
  ${REDUCE}
  if (k == 0u && tile < ${TILES}u) {
    let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
    var value = ${FINISH};
    ${EPILOGUE}
    dst[oi] = D4(value);
  }
}
