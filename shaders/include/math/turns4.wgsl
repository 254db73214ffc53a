// Vulkan bounds sin/cos error only on [-pi, pi]: reduce by 2*pi first (Cody-Waite, 2*pi split as 6.28125 +
// rest so k * 6.28125 is exact), accurate for |x| up to ~1e5.
fn turns4(x: vec4<f32>) -> vec4<f32> {
  let k = round(x * 0.15915494309189535);
  return (x - k * 6.28125) - k * 0.0019353071795864769;
}
