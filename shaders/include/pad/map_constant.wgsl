// PAD / PADV2 along one axis: `map_NAME(o)` is the input index of output index o (BEFORE elements of padding
// first, N input elements), or -1 inside the constant padding.
fn map_${NAME}(o: u32) -> i32 {
  let i = i32(o) - ${BEFORE};
  return select(-1, i, i >= 0 && i < ${N});
}
