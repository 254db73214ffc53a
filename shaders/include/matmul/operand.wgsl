// A matmul operand (BATCH_MATMUL, ATTENTION): `NAME_at(i0, i1, row, sl)` is its stored vec4 (row, slice) for
// output batch (i0, i1); INDEX bakes the operand's rank and broadcasting.
fn ${NAME}_at(i0: u32, i1: u32, row: u32, sl: u32) -> vec4<f32> { return vec4<f32>(${NAME}[${INDEX}]); }
