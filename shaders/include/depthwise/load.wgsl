// DEPTHWISE_CONV_2D with multiplier 1: `load(ob, iy, ix, os)` is input slice os at pixel (iy, ix), in storage
// precision (the input has IN_VOLUME vec4s a batch, PLANE a slice).
fn load(ob: u32, iy: u32, ix: u32, os: u32) -> S4 {
  let base = ob * ${IN_VOLUME}u + iy * ${IW}u + ix;
  return S4(src[base + os * ${PLANE}u]);
}
