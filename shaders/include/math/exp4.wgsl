// exp with an accuracy that does not depend on x. WGSL allows exp an error of 3 + 2|x| ULP (lavapipe computes
// exp2(x * log2(e)), whose rounded argument costs ~|x| ULP): LOGISTIC(-20) was 17 ULP off where XNNPACK is within
// 3.4, EXP(80) 60 ULP (tests/test_accuracy.py). exp(x) = 2^n exp(r): n = round(x / ln 2), r = x - n ln 2 in
// [-0.35, 0.35] with ln 2 split in two (n * 0.693145751953125 is exact for |n| < 256), exp(r) by its Taylor
// polynomial of degree 7 (truncation 0.1 ULP): within 1.2 ULP on lavapipe. x is clamped so 2^n stays in ldexp's
// range; results past f32's range are set as LiteRT's (inf, 0), NaN passes.
fn exp4(x: vec4<f32>) -> vec4<f32> {
  let c = clamp(x, vec4<f32>(-104.0), vec4<f32>(88.72283935546875));
  let n = round(c * 1.4426950408889634);
  let r = (c - n * 0.693145751953125) - n * 1.4286068203094173e-06;
  let p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * (
    0.008333333333333333 + r * (0.001388888888888889 + r * 0.0001984126984126984))))));
  var e = select(ldexp(p, vec4<i32>(n)), vec4<f32>(0.0), x < vec4<f32>(-104.0));
  e = select(e, vec4<f32>(nonfinite_f32(0x7f800000u)), x > vec4<f32>(88.72283935546875));
  return select(e, x, (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));
}
