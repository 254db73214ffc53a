// The head of main in MediaPipe's transform kernels: one PHWC4 output vec4 of batch 0 per invocation, gid = (x, y,
// slice) over the output's H x W pixels, `oi` its index in `dst`.
#include "grid_main.wgsl"
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z;
  let ob = 0u;
  let oi = (os * ${H}u + oy) * ${W}u + ox;
