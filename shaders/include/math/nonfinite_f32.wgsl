// The f32 whose bit pattern is `bits`, made at run time: WGSL makes a constant expression that evaluates to inf
// or NaN (bitcast<f32>(0x7f800000u)) a shader-creation error, and a call of a declared function is not constant.
// codegen.render appends this to every shader that calls it.
fn nonfinite_f32(bits: u32) -> f32 {
  return bitcast<f32>(bits);
}
