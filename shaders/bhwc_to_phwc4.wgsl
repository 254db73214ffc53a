// Boundary converter: dense BHWC float array -> PHWC4 slices (padding lanes zero).
${BINDINGS}

#include "grid_main.wgsl"
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let base = ((ob * ${H}u + oy) * ${W}u + ox) * ${C}u;
  var value = vec4<f32>(0.0);
  for (var i = 0u; i < 4u; i++) {
    let c = os * 4u + i;
    if (c < ${C}u) { value[i] = src[base + c]; }
  }
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  ${EPILOGUE}
  dst[oi] = D4(value);
}
