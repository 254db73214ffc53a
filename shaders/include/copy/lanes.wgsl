// A body of copy.wgsl gathering `value` lane by lane: INIT, then LANE per output channel c of the slice (every
// lane holds a channel).
var value = ${INIT};
for (var l = 0u; l < 4u; l++) {
  let c = os * 4u + l;
  ${LANE}
}
