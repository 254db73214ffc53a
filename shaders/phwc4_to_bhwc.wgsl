// Boundary converter: PHWC4 slices -> dense BHWC float array.
${BINDINGS}

#include "grid_main.wgsl"
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let value = vec4<f32>(src[((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox]);
  let base = ((ob * ${H}u + oy) * ${W}u + ox) * ${C}u;
  for (var i = 0u; i < 4u; i++) {
    let c = os * 4u + i;
    if (c < ${C}u) { dst[base + c] = value[i]; }
  }
}
