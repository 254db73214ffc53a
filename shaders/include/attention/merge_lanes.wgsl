// Flash-decoding's merge at the end of attention_lanes.wgsl: invocation 0 counts its row's arrival after the tile's
// state is stored (storageBarrier: the state is visible first); the tile that arrives last (CHUNKS arrivals) resets
// the count for the next dispatch and merges the row's CHUNKS states. Slice s is merged by MERGE_R adjacent
// invocations (within one subgroup: MERGE_R <= 4), each over every MERGE_R-th chunk with its own running maximum,
// then combined by shuffles; the flag is read uniformly (workgroupUniformLoad), as the shuffles need.
storageBarrier();
if (pos == 0u) {
  var last = 0u;
  if (has_row) {
    let arrived = atomicAdd(&arrivals[row], 1u);
    if (arrived == ${CHUNKS_LAST}u) {
      atomicStore(&arrivals[row], 0u);
      last = 1u;
    }
  }
  last_tile = last;
}
let is_last = workgroupUniformLoad(&last_tile);
storageBarrier();
if (is_last == 1u) {
  for (var t0 = 0u; t0 < ${VS}u * ${MERGE_R}u; t0 += ${WG_X}u) {
    let t = t0 + pos;
    let s = min(t / ${MERGE_R}u, ${VS_LAST}u);
    var top = ${LOWEST};
    var weights = 0.0;
    var merged = vec4<f32>(0.0);
    for (var j = t % ${MERGE_R}u; j < ${CHUNKS}u; j += ${MERGE_R}u) {
      let at = 1u + (row * ${CHUNKS}u + j) * ${STATE}u;
      let state = partials[at];
      let next = max(top, state.x);
      let a = exp(top - next);
      let w = exp(state.x - next);
      weights = weights * a + state.y * w;
      merged = merged * a + partials[at + 1u + s] * w;
      top = next;
    }
    for (var o = 1u; o < ${MERGE_R}u; o = o << 1u) {
      let other = subgroupShuffleXor(vec2<f32>(top, weights), o);
      let other_merged = subgroupShuffleXor(merged, o);
      let next = max(top, other.x);
      let a = exp(top - next);
      let w = exp(other.x - next);
      weights = weights * a + other.y * w;
      merged = merged * a + other_merged * w;
      top = next;
    }
    if (t % ${MERGE_R}u == 0u && t / ${MERGE_R}u < ${VS}u) {
      store(merged / weights, i0, i1, m, s);
    }
  }
}
