// BATCH_MATMUL: a tile is one output vec4 (4 adjacent n, slice ns) of row m in batch (i0, i1); its SPLIT invocations
// take every SPLIT-th step of 4 k from step k on and add up their sums. A_EXPR is X[m, 4k4..4k4+3], B_EXPR the
// mat4x4 whose column j is Y[4k4+j, 4ns..4ns+3]; generated readers bake each operand's rank, broadcasting,
// adjacency and layout view. LOCATE finds the output vec4 (ob, oy, ox, os, oi) in the tensor written, through
// the output's layout view when it has one.
${BINDINGS}

${READERS}

${LANE_MEMORY}

#include "tile_main.wgsl"
  let m = tile % ${M}u;
  let ns = tile / ${M}u % ${NS}u;
  let bi = min(tile / ${M}u / ${NS}u, ${BATCH_LAST}u);
  let i0 = bi / ${B1}u;
  let i1 = bi % ${B1}u;
  var acc = vec4<f32>(0.0);
  for (var k4 = k; k4 < ${KS}u; k4 += ${SPLIT}u) {
    acc += ${B_EXPR} * ${A_EXPR};
  }
  ${REDUCE}
  if (k == 0u && tile < ${TILES}u) {
    ${LOCATE}
    var value = acc;
    ${EPILOGUE}
    dst[oi] = D4(value);
  }
}
