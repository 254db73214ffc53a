// ATTENTION: the part of a row's work both key-loop shaders share (attention.wgsl, attention_partials.wgsl): the
// row's indices, its query, the online-softmax state, the key loop (KEYS: keys.wgsl or shared_keys.wgsl, filled
// per dispatch) and the merge of a split (COMBINE: combine.wgsl).
${ROW}
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
let scale = ${SCALE};
${KEYS}
${COMBINE}
