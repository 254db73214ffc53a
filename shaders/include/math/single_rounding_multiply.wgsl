// (x * multiplier + 2^(t - 1)) >> t with t = 31 - shift in 64-bit arithmetic: one rounding (ties up), as LiteRT
// 2.3.0's int8 ADD / SUB scale their inputs (measured: 0 of 2.6 million elements off, where MultiplyByQuantized-
// Multiplier's two roundings miss 2). The 62-bit product |x| * multiplier from 16-bit pieces; shift <= 0.
fn single_rounding_multiply(v: vec4<i32>, m: i32, shift: i32) -> vec4<i32> {
  let t = u32(31 - shift);
  let y = u32(m);
  var out = vec4<i32>(0);
  for (var l = 0u; l < 4u; l++) {
    let x = u32(abs(v[l]));
    let p00 = (x & 0xffffu) * (y & 0xffffu);
    let p01 = (x & 0xffffu) * (y >> 16u);
    let p10 = (x >> 16u) * (y & 0xffffu);
    let p11 = (x >> 16u) * (y >> 16u);
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    var lo = (p00 & 0xffffu) | (mid << 16u);
    var hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    // + 2^(t - 1), less 1 for a negative x (its ties go up, towards zero)
    var add_lo = select(0u, 1u << (t - 1u), t - 1u < 32u);
    var add_hi = select(0u, 1u << (t - 33u), t - 1u >= 32u);
    if (v[l] < 0) {
      add_hi = select(add_hi, add_hi - 1u, add_lo == 0u);
      add_lo = add_lo - 1u;
    }
    let sum_lo = lo + add_lo;
    hi = hi + add_hi + select(0u, 1u, sum_lo < lo);
    lo = sum_lo;
    let r = select((hi << (32u - t)) | (lo >> t), hi >> (t - 32u), t >= 32u);
    out[l] = select(i32(r), -i32(r), v[l] < 0);
  }
  return out;
}
