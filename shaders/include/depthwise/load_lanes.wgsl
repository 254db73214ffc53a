// DEPTHWISE_CONV_2D with any other multiplier MULT: output lane l of slice os reads input channel
// (4 os + l) / MULT (at most IC_LAST), lane by lane.
fn load(ob: u32, iy: u32, ix: u32, os: u32) -> S4 {
  let base = ob * ${IN_VOLUME}u + iy * ${IW}u + ix;
  let c0 = min((os * 4u + 0u) / ${MULT}u, ${IC_LAST}u);
  let c1 = min((os * 4u + 1u) / ${MULT}u, ${IC_LAST}u);
  let c2 = min((os * 4u + 2u) / ${MULT}u, ${IC_LAST}u);
  let c3 = min((os * 4u + 3u) / ${MULT}u, ${IC_LAST}u);
  return S4(S1(src[base + c0 / 4u * ${PLANE}u][c0 % 4u]), S1(src[base + c1 / 4u * ${PLANE}u][c1 % 4u]), S1(src[base + c2 / 4u * ${PLANE}u][c2 % 4u]), S1(src[base + c3 / 4u * ${PLANE}u][c3 % 4u]));
}
