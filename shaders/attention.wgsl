// ATTENTION: softmax(scale * Q K^T + mask) V, one query row per tile, with the softmax computed online (running
// maximum and sum, rescaling the accumulated output), so the score row never leaves registers and any number of
// keys fits. Readers (xq_at, xk_at, yv_at, am_at) bake each operand's rank, broadcasting and layout view; key_at and
// value_at read slice s of key / value n of K/V head kv1 (the query head, or its group's head), mask_at the scaled
// mask element (0 without a mask). The output row's slices go through `store`, which finds the vec4 in the tensor
// written (through the output's layout view when it has one) and applies the epilogue. KEYS runs the key loop:
// invocation k of a row takes keys k, k + split, ... (COMBINE then merges the states of a row's invocations
// through workgroup memory, PARTIALS), or the workgroup's rows share blocks of keys loaded into KV_MEMORY.
${BINDINGS}

${READERS}
#include "attention/operands.wgsl"


fn store(v: vec4<f32>, i0: u32, i1: u32, m: u32, ns: u32) {
  ${LOCATE}
#include "store_value.wgsl"

${PARTIALS}
${KV_MEMORY}

#include "tile_main.wgsl"
  #include "attention/row.wgsl"
  if (k == 0u && has_row) {
    for (var s = 0u; s < ${VS}u; s++) {
      store(acc[s] / total, i0, i1, m, s);
    }
  }
}
