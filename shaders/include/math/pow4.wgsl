// std::pow semantics: x^0 = 1, 0^y = 0 or inf, negative bases only with integral exponents (NaN otherwise).
fn pow4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  let zero = vec4<f32>(0.0);
  let inf = vec4<f32>(nonfinite_f32(0x7f800000u));
  let nan = vec4<f32>(nonfinite_f32(0x7fc00000u));
  let m = exp2(b * log2(abs(a)));
  let integral = floor(b) == b;
  let odd = integral & (abs(b - 2.0 * floor(b * 0.5)) == vec4<f32>(1.0));
  var r = select(m, -m, (a < zero) & odd);
  r = select(r, nan, (a < zero) & !integral);
  r = select(r, select(inf, zero, b > zero), a == zero);
  return select(r, vec4<f32>(1.0), b == zero);
}
