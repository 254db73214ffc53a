// A conv's reduction over input slices: invocation k of a tile takes every SPLIT-th slice from slice k on, its
// weight index wi and input index si advancing with it (TAPS: the unrolled multiply-adds of one slice).
for (var sl = k; sl < ${SI}u; sl += ${SPLIT}u) {
  ${TAPS}
  wi += ${SPLIT}u;
  si += ${SPLIT_PLANE}u;
}
