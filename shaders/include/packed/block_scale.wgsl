// A blockwise weight table's `NAME_block_scale(r, b)`: the scale of block b of row r, two float16 scales a word
// (NAME_scale_pair), as in the file.
fn ${NAME}_block_scale(r: u32, b: u32) -> f32 {
  return unpack2x16float(${NAME}_scale_pair(r, b >> 1u))[b & 1u];
}
