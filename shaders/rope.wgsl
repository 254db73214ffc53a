// ROPE: rotary position embedding over the last axis (width 2H): out[c] = x[c] cos[c] - x[c + H] sin[c] for
// c < H, x[c] cos[c - H] + x[c - H] sin[c - H] otherwise; one PHWC4 output vec4 per invocation, lane by lane.
// X_AT / COS_AT / SIN_AT read x (through its layout view: the fused QKV projection's output, read in place) and the
// tables at logical channel `cx` / `j` of the output row (ob, oy, ox). HELPERS: the math functions LANE calls.
${BINDINGS}
${HELPERS}

#include "element_main.wgsl"
  var value = vec4<f32>(0.0);
  for (var l = 0u; l < 4u; l++) {
    let c = os * 4u + l;
    if (c >= ${C}u) { break; }
    ${LANE}
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
