// The head of main in kernels that compute one PHWC4 output vec4 per invocation (the elementwise and layout
// family): gid = (x, y, batch * S + slice) over the output's S slices x H x W, out of range returns, and `oi`, the
// vec4's index in `dst`. A shader opens main with this include and goes on from there.
#include "grid_main.wgsl"
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
