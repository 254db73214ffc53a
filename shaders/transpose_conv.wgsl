// TRANSPOSE_CONV (and MediaPipe's Convolution2DTransposeBias) as a gather: output pixel (oy, ox) reads input
// (iy, ix) through tap (ky, kx) when iy*SH - PT + ky == oy; only taps of the matching phase are visited.
// Weights are mat4x4 blocks [out_slice][ky][kx][in_slice]; each invocation computes ST output slices.
${BINDINGS}

#include "store_fn.wgsl"

#include "grid_main.wgsl"
  let ox = gid.x;
  let oy = gid.y;
  let os0 = (gid.z % ${SG}u) * ${ST}u;
  let ob = gid.z / ${SG}u;
  ${ACC_INIT}
  let ty = i32(oy) + ${PT};
  let tx = i32(ox) + ${PL};
  for (var ky = u32(ty % ${SH}); ky < ${KH}u; ky += ${SH}u) {
    let iy = (ty - i32(ky)) / ${SH};
    if (iy < 0 || iy >= ${IH}) { continue; }
    for (var kx = u32(tx % ${SW}); kx < ${KW}u; kx += ${SW}u) {
      let ix = (tx - i32(kx)) / ${SW};
      if (ix < 0 || ix >= ${IW}) { continue; }
      var wi = ((os0 * ${KH}u + ky) * ${KW}u + kx) * ${SI}u;
      var si = (ob * ${SI}u * ${IH}u + u32(iy)) * ${IW}u + u32(ix);
      for (var sl = 0u; sl < ${SI}u; sl++) {
        let s = S4(src[si]);
        ${TAPS}
        wi += 1u;
        si += ${PLANE}u;
      }
    }
  }
  ${STORE}
}
