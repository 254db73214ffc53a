// An int8 matmul operand read as its integers q - zero point: the real value (NAME_real) times INVERSE_SCALE,
// rounded.
fn ${NAME}_at(i0: u32, i1: u32, row: u32, sl: u32) -> vec4<f32> { return round(${NAME}_real(i0, i1, row, sl) * ${INVERSE_SCALE}); }
