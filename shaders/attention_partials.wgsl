// ATTENTION, flash-decoding's first dispatch: tile = (row, chunk c of the keys). The invocations of a tile reduce
// the chunk's keys to one online-softmax state (see attention.wgsl: KEYS reads them from storage, COMBINE merges a
// split, or the rows of one KV head share blocks of keys loaded into KV_MEMORY) and invocation 0 writes it to
// `partials`: entry 0 holds the chunk count (for the merge), then per row and chunk STATE vec4s: (max, sum, 0,
// 0) and the VS slices of the weighted value sum.
${BINDINGS}

${READERS}
#include "attention/operands.wgsl"


${PARTIALS}
${KV_MEMORY}

#include "tile_main.wgsl"
  #include "attention/row.wgsl"
  if (k == 0u && has_row) {
    let base = 1u + (row * ${CHUNKS}u + c) * ${STATE}u;
    partials[base] = vec4<f32>(mx, total, 0.0, 0.0);
    for (var s = 0u; s < ${VS}u; s++) {
      partials[base + 1u + s] = acc[s];
    }
  }
  if (k == 0u && tile == 0u) {
    partials[0] = vec4<f32>(f32(${CHUNKS}u));
  }
}
