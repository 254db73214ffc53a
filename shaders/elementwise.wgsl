// Elementwise ops: one PHWC4 output vec4 per invocation. Operands are read through generated read_*
// functions that bake each operand's shape and broadcasting; BODY computes `value` from them.
${BINDINGS}

${READERS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  ${BODY}
  ${EPILOGUE}
  dst[oi] = D4(value);
}
