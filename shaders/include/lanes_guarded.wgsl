// `value` of output slice os computed lane by lane where the last slice may have padding lanes (layout ops'
// copy.wgsl bodies, KV cache rotations): INIT, then LANE per output channel c below C.
var value = ${INIT};
for (var l = 0u; l < 4u; l++) {
  let c = os * 4u + l;
  if (c >= ${C}u) { break; }
  ${LANE}
}
