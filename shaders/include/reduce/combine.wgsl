// How a reduction combines two partial results (COMBINE: the op's expression of a and b).
fn combine(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
  return ${COMBINE};
}
