// MediaPipe MaxUnpooling2D as a gather: one PHWC4 output vec4 per invocation. Input pixel (iy, ix) writes its
// value to window offset idx = i32(indices) (my = idx / FW, mx = idx % FW) of its window, the last writer in
// raster order winning. Indices are bounded (they come from a MaxPoolingWithArgmax2D), so only inputs whose
// window start lies within MAX_DY / MAX_DX before the output pixel can hit it; they are scanned in raster order.
${BINDINGS}

#include "element_main.wgsl"
  let ty = i32(oy) + ${PAD_T};
  let tx = i32(ox) + ${PAD_L};
  let iy0 = (max(ty - ${MAX_DY}, 0) + ${STRIDE_H} - 1) / ${STRIDE_H};
  let iy1 = min(ty / ${STRIDE_H}, ${IN_H} - 1);
  let ix0 = (max(tx - ${MAX_DX}, 0) + ${STRIDE_W} - 1) / ${STRIDE_W};
  let ix1 = min(tx / ${STRIDE_W}, ${IN_W} - 1);
  let base = (ob * ${S}u + os) * ${IN_H}u;
  var value = vec4<f32>(0.0);
  for (var iy = iy0; iy <= iy1; iy++) {
    for (var ix = ix0; ix <= ix1; ix++) {
      let ii = (base + u32(iy)) * ${IN_W}u + u32(ix);
      let idx = vec4<i32>(indices[ii]);
      let hit = (idx / vec4<i32>(${FW}) == vec4<i32>(ty - iy * ${STRIDE_H}))
              & (idx % vec4<i32>(${FW}) == vec4<i32>(tx - ix * ${STRIDE_W}));
      value = select(value, vec4<f32>(src[ii]), hit);
    }
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
