// An int4 weight table read as int8 words: `NAME_word(r, w)` is word w of row r with the nibbles of the packed
// word NAME_int4(r, w / 2) (its low or high half) sign-extended to bytes (kernels/packed_int8.py).
fn ${NAME}_word(r: u32, w: u32) -> u32 {
  let v = (${NAME}_int4(r, w >> 1u) >> ((w & 1u) * 4u)) & 0x0F0F0F0Fu;
  return v | ((v & 0x08080808u) * 0x1Eu);
}
