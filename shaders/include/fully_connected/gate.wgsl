// A gated projection's `gate(a, up)` = act(a) * up (ACTIVATION: the elementwise kernel's expression of a).
fn gate(a: vec4<f32>, up: vec4<f32>) -> vec4<f32> {
  return (${ACTIVATION}) * up;
}
