// DEPTHWISE_CONV_2D with a multiplier MULT of 4k: the 4 outputs of slice os share input channel c.
fn load(ob: u32, iy: u32, ix: u32, os: u32) -> S4 {
  let base = ob * ${IN_VOLUME}u + iy * ${IW}u + ix;
  let c = os * 4u / ${MULT}u;
  return S4(S1(src[base + c / 4u * ${PLANE}u][c % 4u]));
}
