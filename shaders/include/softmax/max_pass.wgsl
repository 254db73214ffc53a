// SOFTMAX / LOG_SOFTMAX's first pass: the row's maximum m (per lane; the padding lanes of the last slice, S_LAST,
// masked out), combined over the tile's split invocations (REDUCE).
for (var s = k; s < ${S}u; s += ${SPLIT}u) {
  var v = vec4<f32>(src[base + s * plane]);
  if (s == ${S_LAST}u) { v = select(vec4<f32>(${LOWEST}), v, last_mask); }
  m = max(m, v);
}
${REDUCE}
