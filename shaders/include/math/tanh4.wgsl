// WGSL's tanh may return NaN for large |x| (it is sinh/cosh on some drivers), so tanh|x| = (1 - e) / (1 + e) with
// e = exp(-2|x|) -> 0; 1 - e and 1 + e come from expm1 (1 - e = -m, 1 + e = 2 + m), not from e, whose rounding
// would cancel in 1 - e near 0 (was 1,560 ULP off at x ~ 1e-3, XNNPACK 4.2).
fn tanh4(x: vec4<f32>) -> vec4<f32> {
  let m = expm1_4(-2.0 * abs(x));
  return sign(x) * (-m / (2.0 + m));
}
