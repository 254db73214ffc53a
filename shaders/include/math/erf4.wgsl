// Abramowitz & Stegun 7.1.26, |error| < 1.5e-7. |x| is capped at 10 (erf is exactly +-1 in f32 from ~3.9 on), so
// the divisor stays in [1, 4.3]: GPUs divide accurately only by |d| < 2^126 and an infinite x would give inf / inf.
fn erf4(x: vec4<f32>) -> vec4<f32> {
  let z = min(abs(x), vec4<f32>(10.0));
  let t = 1.0 / (1.0 + 0.3275911 * z);
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp4(-z * z);
  return sign(x) * y;
}
