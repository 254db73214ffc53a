// FULLY_CONNECTED: rows of P input pixels x SI slices against mat4x4 weight blocks [out_slice][in_slice][pixel].
// Each invocation computes RT rows x ST output slices (one weight load feeds RT rows, one input load ST slices).
${BINDINGS}

${SRC_INDEX}

fn store(v: vec4<f32>, r: u32, os: u32) {
${STORE}
  var value = v;
  ${EPILOGUE}
  dst[oi] = value;
}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let r0 = gid.x * ${RT}u;
  let os0 = gid.y * ${ST}u;
  ${ACC_INIT}
  var wi = os0 * ${SI}u * ${P}u;
  for (var sl = 0u; sl < ${SI}u; sl++) {
    for (var px = 0u; px < ${P}u; px++) {
      ${TAPS}
      wi += 1u;
    }
  }
  ${STORE_ALL}
}
