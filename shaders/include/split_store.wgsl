// The end of main in kernels whose tile is reduced by SPLIT invocations: the partial results combined (REDUCE),
// then invocation 0 of each tile in range stores the tile (STORE).
  ${REDUCE}
  if (k == 0u && tile < ${TILES}u) {
    ${STORE}
  }
}
