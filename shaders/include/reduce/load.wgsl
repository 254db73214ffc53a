// A reduction over axes other than the channel axis: `load(ob, oy, ox, os, q)` is READ, the input vec4 at reduced
// index q, whose coordinates DECODE gives (one line each, generated).
fn load(ob: u32, oy: u32, ox: u32, os: u32, q: u32) -> vec4<f32> {
${DECODE}
  return ${READ};
}
