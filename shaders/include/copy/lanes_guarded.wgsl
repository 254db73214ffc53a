// A body of copy.wgsl gathering `value` lane by lane where the last slice has padding lanes: INIT, then LANE per
// output channel c below C.
var value = ${INIT};
for (var l = 0u; l < 4u; l++) {
  let c = os * 4u + l;
  if (c >= ${C}u) { break; }
  ${LANE}
}
