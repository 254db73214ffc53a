// `value` of output slice os computed lane by lane (layout ops' copy.wgsl bodies, KV cache rotations): INIT, then
// LANE per output channel c of the slice (every lane holds a channel).
var value = ${INIT};
for (var l = 0u; l < 4u; l++) {
  let c = os * 4u + l;
  ${LANE}
}
