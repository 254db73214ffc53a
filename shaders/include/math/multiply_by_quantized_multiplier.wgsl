// LiteRT's integer output stage, MultiplyByQuantizedMultiplier, in exact 32-bit integer arithmetic (WGSL has no
// i64; kernels/common.py explains it): exact int8 FULLY_CONNECTED, BATCH_MATMUL and convs call it in their
// epilogues, int8 ADD / SUB in their expression.
fn rounding_high_mul(a: i32, m: i32) -> i32 {
  let x = u32(abs(a));
  let y = u32(m);
  let p00 = (x & 0xffffu) * (y & 0xffffu);
  let p01 = (x & 0xffffu) * (y >> 16u);
  let p10 = (x >> 16u) * (y & 0xffffu);
  let p11 = (x >> 16u) * (y >> 16u);
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let lo = (p00 & 0xffffu) | (mid << 16u);
  let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  let nudged = lo + select(0x40000000u, 0x3fffffffu, a < 0);
  let high = ((hi + select(0u, 1u, nudged < lo)) << 1u) | (nudged >> 31u);
  return select(i32(high), -i32(high), a < 0);
}
fn rounding_shift_right(x: i32, exponent: u32) -> i32 {
  return (x + i32((1u << exponent) >> 1u)) >> exponent;
}
fn rounding_divide_by_pot(x: i32, exponent: u32) -> i32 {
  let mask = i32((1u << exponent) - 1u);
  let threshold = (mask >> 1u) + select(0, 1, x < 0);
  return (x >> exponent) + select(0, 1, (x & mask) > threshold);
}
fn multiply_by_quantized_multiplier(acc: vec4<i32>, multiplier: vec4<i32>, shift: vec4<i32>, ruy: bool) -> vec4<i32> {
  var out = vec4<i32>(0);
  for (var l = 0u; l < 4u; l++) {
    let high = rounding_high_mul(acc[l] << u32(max(shift[l], 0)), multiplier[l]);
    let right = u32(max(-shift[l], 0));
    out[l] = select(rounding_divide_by_pot(high, right), rounding_shift_right(high, right), ruy);
  }
  return out;
}
