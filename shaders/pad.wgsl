// PAD / PADV2 / MIRROR_PAD: one PHWC4 output vec4 per invocation, gathered from the input through the
// generated per-axis map_* functions (input index, or -1 inside constant padding).
${BINDINGS}

${MAPS}

fn src_at(b: u32, s: u32, y: u32, x: u32) -> u32 {
  return ((b * ${IS}u + s) * ${IH}u + y) * ${IW}u + x;
}

#include "element_main.wgsl"
  let ib = map_b(ob);
  let iy = map_y(oy);
  let ix = map_x(ox);
  var value = vec4<f32>(${VALUE});
  if (ib >= 0 && iy >= 0 && ix >= 0) {
    if (${WHOLE}) {
      value = vec4<f32>(src[src_at(u32(ib), os, u32(iy), u32(ix))]);
    } else {
      for (var k = 0u; k < 4u; k++) {
        let ic = map_c(os * 4u + k);
        if (ic >= 0 && ic < ${IC}) {
          value[k] = f32(src[src_at(u32(ib), u32(ic) / 4u, u32(iy), u32(ix))][u32(ic) % 4u]);
        }
      }
    }
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
