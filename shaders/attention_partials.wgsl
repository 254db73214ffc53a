// ATTENTION, flash-decoding's first dispatch: tile = (row, chunk of CHUNK keys). The invocations of a tile reduce
// the chunk's keys to one online-softmax state (see attention.wgsl; COMBINE merges them) and invocation 0 writes it
// to `partials`: entry 0 holds the chunk count (for the merge), then per row and chunk STATE vec4s: (max, sum, 0,
// 0) and the VS slices of the weighted value sum.
${BINDINGS}

${READERS}

${PARTIALS}

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32${LANE_ARGS}) {
  ${LANE}
  let t = min(tile, ${TILES}u - 1u);
  let row = t / ${CHUNKS}u;
  let c = t % ${CHUNKS}u;
  let m = row % ${M}u;
  let bi = row / ${M}u;
  let i0 = bi / ${B1}u;
  let i1 = bi % ${B1}u;
  let kv1 = ${KV};
  var q: array<vec4<f32>, ${DS}>;
  for (var s = 0u; s < ${DS}u; s++) {
    q[s] = xq_at(i0, i1, m, s);
  }
  var mx = ${LOWEST};
  var total = 0.0;
  var acc: array<vec4<f32>, ${VS}>;
  let end = min(${N}u, (c + 1u) * ${CHUNK}u);
  for (var n = c * ${CHUNK}u + k; n < end; n += ${SPLIT}u) {
    var dot_qk = 0.0;
    for (var s = 0u; s < ${DS}u; s++) {
      dot_qk += dot(q[s], key_at(i0, kv1, n, s));
    }
    let score = dot_qk * ${SCALE} + mask_at(i0, i1, m, n);
    let top = max(mx, score);
    let corr = exp(mx - top);
    let p = exp(score - top);
    total = total * corr + p;
    for (var s = 0u; s < ${VS}u; s++) {
      acc[s] = acc[s] * corr + p * value_at(i0, kv1, n, s);
    }
    mx = top;
  }
  ${COMBINE}
  if (k == 0u && tile < ${TILES}u) {
    let base = 1u + t * ${STATE}u;
    partials[base] = vec4<f32>(mx, total, 0.0, 0.0);
    for (var s = 0u; s < ${VS}u; s++) {
      partials[base + 1u + s] = acc[s];
    }
    if (tile == 0u) {
      partials[0] = vec4<f32>(f32(${CHUNKS}u));
    }
  }
}
