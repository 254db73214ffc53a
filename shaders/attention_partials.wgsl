// ATTENTION, flash-decoding in one dispatch: tile = (row, chunk c of the keys). The invocations of a tile reduce
// the chunk's keys to one online-softmax state (see attention.wgsl: KEYS reads them from storage, COMBINE merges a
// split, or the rows of one KV head share blocks of keys loaded into KV_MEMORY) and invocation 0 writes it to
// `partials` (per row and chunk STATE vec4s: (max, sum, 0, 0) and the VS slices of the weighted value sum). The
// last tile of a row to finish (counted in `arrivals`) then merges the row's states and stores the output:
// attention/merge_last.wgsl.
${BINDINGS}

${READERS}
#include "attention/operands.wgsl"


fn store(v: vec4<f32>, i0: u32, i1: u32, m: u32, ns: u32) {
  ${LOCATE}
#include "store_value.wgsl"

${PARTIALS}
${KV_MEMORY}
var<workgroup> last_tile: array<u32, ${GROUP}>;

#include "tile_main.wgsl"
  #include "attention/row.wgsl"
  if (k == 0u && has_row) {
    let base = 1u + (row * ${CHUNKS}u + c) * ${STATE}u;
    partials[base] = vec4<f32>(mx, total, 0.0, 0.0);
    for (var s = 0u; s < ${VS}u; s++) {
      partials[base + 1u + s] = acc[s];
    }
  }
  #include "attention/merge_last.wgsl"
}
