// KV_CACHE_WRITE: the new rows of a KV cache written into the cache's own buffer (BHWC f32, the signature's
// input and output at once), one vec4 of the update per invocation; the rest of the cache is not touched.
// START reads the run-time offsets (clamped so the update fits, DYNAMIC_UPDATE_SLICE's semantics); UPDATE_AT is
// the update's PHWC4 vec4 index of update coordinates (u0.., channel slice us); DST_AT the cache's BHWC vec4 index.
${BINDINGS}

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= ${TOTAL}u) { return; }
  ${COORDS}
  ${START}
  dst[${DST_AT}] = vec4<f32>(upd[${UPDATE_AT}]);
}
