// KV_CACHE_WRITE: the new rows of a KV cache written into the cache's own buffer (BHWC f32, the signature's
// input and output at once), one vec4 of the update per invocation; the rest of the cache is not touched.
// START reads the run-time offsets (clamped so the update fits, DYNAMIC_UPDATE_SLICE's semantics); LANE sets
// value[l] from update row (u0, ...) at channel c (through the update's layout view, rotated when the op has
// cos / sin tables); DST_AT is the cache's BHWC vec4 index.
${BINDINGS}

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= ${TOTAL}u) { return; }
  ${COORDS}
  ${START}
  var value = vec4<f32>(0.0);
  for (var l = 0u; l < 4u; l++) {
    let c = us * 4u + l;
    ${LANE}
  }
  dst[${DST_AT}] = value;
}
