// DEPTHWISE_CONV_2D, general: any kernel size, stride, dilation, padding and depth multiplier. Each invocation
// computes XT adjacent output columns of one output slice; weights are one vec4 per (out_slice, ky, kx).
${BINDINGS}

${LOAD}

${STORE_FN}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox0 = gid.x * ${XT}u;
  let oy = gid.y;
  let os = gid.z % ${SO}u;
  let ob = gid.z / ${SO}u;
  ${ACC_INIT}
  for (var ky = 0u; ky < ${KH}u; ky++) {
    let iy = i32(oy * ${SH}u + ky * ${DH}u) - ${PT};
    if (iy < 0 || iy >= ${IH}) { continue; }
    for (var kx = 0u; kx < ${KW}u; kx++) {
      let ix0 = i32(ox0 * ${SW}u + kx * ${DW}u) - ${PL};
      ${COLS}
      let w = weights[(os * ${KH}u + ky) * ${KW}u + kx];
      ${TAPS}
    }
  }
  ${STORE}
}
