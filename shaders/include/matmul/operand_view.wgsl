// A matmul operand read through a layout view (kernels/layout_view.py): READ sets `value` from the tensor stored.
fn ${NAME}_at(i0: u32, i1: u32, row: u32, sl: u32) -> vec4<f32> {
  ${READ}
  return value;
}
