// The key loop of a row over keys [START, END) (every SPLIT-th key from key k on), reading K and V from storage.
for (var n = ${START} + k; n < ${END}; n += ${SPLIT}u) {
  var dot_qk = 0.0;
  for (var s = 0u; s < ${DS}u; s++) {
    dot_qk += dot(q[s], key_at(i0, kv1, n, s));
  }
  #include "attention/update.wgsl"
  for (var s = 0u; s < ${VS}u; s++) {
    acc[s] = acc[s] * corr + p * value_at(i0, kv1, n, s);
  }
  mx = top;
}
