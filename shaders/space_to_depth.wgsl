// SPACE_TO_DEPTH (DCR): out[b, y, x, (dy * BLOCK + dx) * C + c] = in[b, y * BLOCK + dy, x * BLOCK + dx, c].
// One PHWC4 output vec4 per invocation; WHOLE (C % 4 == 0) copies one input vec4, else lanes are gathered.
${BINDINGS}

fn src_at(b: u32, s: u32, y: u32, x: u32) -> u32 {
  return ((b * ${IS}u + s) * ${IH}u + y) * ${IW}u + x;
}

#include "element_main.wgsl"
  var value = vec4<f32>(0.0);
  if (${WHOLE}) {
    let blk = (os * 4u) / ${C}u;
    let s = os - blk * (${C}u / 4u);
    value = vec4<f32>(src[src_at(ob, s, oy * ${BLOCK}u + blk / ${BLOCK}u, ox * ${BLOCK}u + blk % ${BLOCK}u)]);
  } else {
    for (var k = 0u; k < 4u; k++) {
      let oc = os * 4u + k;
      let blk = oc / ${C}u;
      let c = oc % ${C}u;
      if (blk < ${BLOCK}u * ${BLOCK}u) {
        value[k] = f32(src[src_at(ob, c / 4u, oy * ${BLOCK}u + blk / ${BLOCK}u, ox * ${BLOCK}u + blk % ${BLOCK}u)][c % 4u]);
      }
    }
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
