// Elementwise ops: one PHWC4 output vec4 per invocation. Operands are read through generated read_*
// functions that bake each operand's shape and broadcasting; BODY computes `value` from them.
${BINDINGS}

${READERS}

#include "element_main.wgsl"
  ${BODY}
  ${EPILOGUE}
  dst[oi] = D4(value);
}
