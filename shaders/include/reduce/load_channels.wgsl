// A reduction over the channel axis (and maybe others): `load(ob, oy, ox, os, q)` is, per output lane l of slice
// os, the HORIZONTAL reduction of the vec4 v (READ of input slice s = q / STRIDE) at reduced index q; DECODE
// gives the reduced coordinates of q (one line each, generated), MASK (empty, or a line) sets the padding lanes
// of the last input slice to the identity INIT.
fn load(ob: u32, oy: u32, ox: u32, os: u32, q: u32) -> vec4<f32> {
${DECODE}
  let s = q / ${STRIDE}u;
  var res = ${INIT};
  for (var l = 0u; l < 4u; l++) {
    let oc = os * 4u + l;
    if (oc >= ${OC}u) { break; }
    var v = ${READ};
${MASK}    res[l] = ${HORIZONTAL};
  }
  return res;
}
