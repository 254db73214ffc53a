// Flash-decoding's merge at the end of attention_partials.wgsl, instead of a second dispatch: each tile's
// invocation 0 counts its row's arrival after its state is stored (storageBarrier: the state is visible first); the
// tile that arrives last (CHUNKS arrivals) resets the count for the next dispatch, and its SPLIT invocations merge
// the row's CHUNKS states (rescaled to their common maximum, in the order the merge dispatch used) slice by slice.
storageBarrier();
if (k == 0u) {
  var last = 0u;
  if (has_row) {
    let arrived = atomicAdd(&arrivals[row], 1u);
    if (arrived == ${CHUNKS_LAST}u) {
      atomicStore(&arrivals[row], 0u);
      last = 1u;
    }
  }
  last_tile[slot] = last;
}
workgroupBarrier();
storageBarrier();
if (has_row && last_tile[slot] == 1u) {
  var top = ${LOWEST};
  for (var j = 0u; j < ${CHUNKS}u; j++) {
    top = max(top, partials[1u + (row * ${CHUNKS}u + j) * ${STATE}u].x);
  }
  for (var s = k; s < ${VS}u; s += ${MERGE_STEP}u) {
    var weights = 0.0;
    var merged = vec4<f32>(0.0);
    for (var j = 0u; j < ${CHUNKS}u; j++) {
      let at = 1u + (row * ${CHUNKS}u + j) * ${STATE}u;
      let state = partials[at];
      let w = exp(state.x - top);
      weights += state.y * w;
      merged += partials[at + 1u + s] * w;
    }
    store(merged / weights, i0, i1, m, s);
  }
}
