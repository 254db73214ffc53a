// ATTENTION: softmax(scale * Q K^T) V for one query row per invocation, with the softmax computed online (running
// maximum and sum, rescaling the accumulated output), so the score row never leaves registers and any number of
// keys fits. Readers (xq_at, xk_at, yv_at, am_at) bake each operand's rank, broadcasting and layout view; SCORE is
// the scaled dot product of the query's D/4 slices with key n, plus the scaled mask element when there is a mask. The output row's slices go through `store`, which finds the
// vec4 in the tensor written (through the output's layout view when it has one) and applies the epilogue. With a
// split, invocation k of a row takes keys k, k + SPLIT, ...; COMBINE merges the states (max, sum, accumulators)
// into invocation 0 through workgroup memory (PARTIALS).
${BINDINGS}

${READERS}

fn store(v: vec4<f32>, i0: u32, i1: u32, m: u32, ns: u32) {
  ${LOCATE}
  var value = v;
  ${EPILOGUE}
  dst[oi] = D4(value);
}

${PARTIALS}

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32${LANE_ARGS}) {
  ${LANE}
  let row_tile = min(tile, ${TILES}u - 1u);
  let m = row_tile % ${M}u;
  let bi = row_tile / ${M}u;
  let i0 = bi / ${B1}u;
  let i1 = bi % ${B1}u;
  ${LOAD_Q}
  var mx = ${LOWEST};
  var total = 0.0;
  ${ACC_INIT}
  for (var n = k; n < ${N}u; n += ${SPLIT}u) {
    let s = ${SCORE};
    let top = max(mx, s);
    let corr = exp(mx - top);
    let p = exp(s - top);
    total = total * corr + p;
    ${ACC_UPDATE}
    mx = top;
  }
  ${COMBINE}
  if (k == 0u && tile < ${TILES}u) {
    ${STORES}
  }
}
