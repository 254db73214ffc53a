// The key loop of a workgroup whose rows read the same K/V, over keys [START, END) (the same for the whole
// workgroup): blocks of BLOCK keys (WIDTH = DS + VS vec4s each) loaded into kv_tile by all its INVOCATIONS
// invocations, then read by each row from workgroup memory.
for (var first = ${START}; first < ${END}; first += ${BLOCK}u) {
  workgroupBarrier();
  for (var e = li; e < ${BLOCK_VEC4S}u; e += ${INVOCATIONS}u) {
    let key_n = min(first + e / ${WIDTH}u, ${END} - 1u);
    let s = e % ${WIDTH}u;
    if (s < ${DS}u) {
      kv_tile[e] = key_at(i0, kv1, key_n, s);
    } else {
      kv_tile[e] = value_at(i0, kv1, key_n, s - ${DS}u);
    }
  }
  workgroupBarrier();
  for (var j = 0u; j < min(${BLOCK}u, ${END} - first); j++) {
    let n = first + j;
    var dot_qk = 0.0;
    for (var s = 0u; s < ${DS}u; s++) {
      dot_qk += dot(q[s], kv_tile[j * ${WIDTH}u + s]);
    }
    #include "attention/update.wgsl"
    for (var s = 0u; s < ${VS}u; s++) {
      acc[s] = acc[s] * corr + p * kv_tile[j * ${WIDTH}u + ${DS}u + s];
    }
    mx = top;
  }
}
