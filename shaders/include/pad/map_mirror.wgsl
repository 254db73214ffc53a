// MIRROR_PAD along one axis: `map_NAME(o)` is the input index of output index o (BEFORE elements of padding first,
// N input elements), mirrored back inside: LOW before the start, HIGH past the end (REFLECT or SYMMETRIC).
fn map_${NAME}(o: u32) -> i32 {
  let i = i32(o) - ${BEFORE};
  if (i < 0) { return ${LOW}; }
  if (i >= ${N}) { return ${HIGH}; }
  return i;
}
