// LAYER_NORM's second pass: the squared deviations from the mean summed (per lane, padding lanes masked out),
// combined over the tile's split invocations (REDUCE).
let mean = first;
var acc2 = vec4<f32>(0.0);
for (var s = k; s < ${S}u; s += ${SPLIT}u) {
  var d = vec4<f32>(src[base + s * plane]) - vec4<f32>(mean);
  if (s == ${S}u - 1u) { d = select(vec4<f32>(0.0), d, last_mask); }
  acc2 += d * d;
}
${REDUCE}
