// Reductions (MEAN, SUM, REDUCE_MAX/MIN/PROD): one PHWC4 output vec4 per invocation, serially combining
// load(..., q) over the flattened reduced index space q in [0, R). `load` is generated per op: it bakes the
// rank mapping, the reduced axes and the channel-padding mask.
${BINDINGS}

${FUNCS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  var acc = ${INIT};
  for (var q = 0u; q < ${R}u; q++) {
    acc = combine(acc, load(ob, oy, ox, os, q));
  }
  var value = ${FINISH};
  ${EPILOGUE}
  dst[oi] = value;
}
