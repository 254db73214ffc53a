// DEPTH_TO_SPACE (DCR): out[b, y, x, c] = in[b, y / BLOCK, x / BLOCK, ((y % BLOCK) * BLOCK + x % BLOCK) * C + c].
// One PHWC4 output vec4 per invocation; WHOLE (C % 4 == 0) copies one input vec4, else lanes are gathered.
${BINDINGS}

fn src_at(b: u32, s: u32, y: u32, x: u32) -> u32 {
  return ((b * ${IS}u + s) * ${IH}u + y) * ${IW}u + x;
}

#include "element_main.wgsl"
  let iy = oy / ${BLOCK}u;
  let ix = ox / ${BLOCK}u;
  let base = ((oy % ${BLOCK}u) * ${BLOCK}u + ox % ${BLOCK}u) * ${C}u;
  var value = vec4<f32>(0.0);
  if (${WHOLE}) {
    value = vec4<f32>(src[src_at(ob, base / 4u + os, iy, ix)]);
  } else {
    for (var k = 0u; k < 4u; k++) {
      let c = os * 4u + k;
      if (c < ${C}u) {
        let ic = base + c;
        value[k] = f32(src[src_at(ob, ic / 4u, iy, ix)][ic % 4u]);
      }
    }
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
