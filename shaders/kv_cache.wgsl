// KV_CACHE_WRITE: the new rows of KV caches written into each cache's own buffer (BHWC f32, the signature's
// input and output at once), one vec4 of an update per invocation; the rest of a cache is not touched.
// WRITES holds one block per cache (a layer's K and V share the dispatch): invocation i -> update row (u0, ...)
// and channel slice us, the run-time offsets (clamped so the update fits, DYNAMIC_UPDATE_SLICE's semantics), the
// four lanes (through the update's layout view, rotated when the write has cos / sin tables), the store.
// HELPERS: the math functions the blocks call (turns4 where a rotation computes its angles).
${BINDINGS}
${HELPERS}

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= ${TOTAL}u) { return; }
  ${WRITES}
}
