// ATTENTION's operands as the key loops read them: key_at / value_at read slice s of key / value n of K/V head i1
// (KEY_BODY: through the K reader, lane by lane where K is stored [D, N]), mask_at the scaled mask element
// (MASK_VALUE: 0 without a mask).
fn key_at(i0: u32, i1: u32, n: u32, s: u32) -> vec4<f32> {
  ${KEY_BODY}
}
fn value_at(i0: u32, i1: u32, n: u32, s: u32) -> vec4<f32> {
  return yv_at(i0, i1, n, s);
}
fn mask_at(i0: u32, i1: u32, m: u32, n: u32) -> f32 {
  return ${MASK_VALUE};
}
