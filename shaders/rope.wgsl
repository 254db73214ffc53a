// ROPE: rotary position embedding over the last axis (width 2H): out[c] = x[c] cos[c] - x[c + H] sin[c] for
// c < H, x[c] cos[c - H] + x[c - H] sin[c - H] otherwise; one PHWC4 output vec4 per invocation, lane by lane.
// X_AT / COS_AT / SIN_AT read x (through its layout view: the fused QKV projection's output, read in place) and the
// tables at logical channel `cx` / `j` of the output row (ob, oy, ox).
${BINDINGS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  var value = vec4<f32>(0.0);
  for (var l = 0u; l < 4u; l++) {
    let c = os * 4u + l;
    if (c >= ${C}u) { break; }
    ${LANE}
  }
  ${EPILOGUE}
  dst[oi] = D4(value);
}
