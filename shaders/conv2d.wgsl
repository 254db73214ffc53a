// CONV_2D, general: any kernel size, stride, dilation and padding. Each invocation computes XT adjacent output
// columns x ST output slices. Weights are mat4x4 blocks [out_slice][ky][kx][in_slice]: a tap is `acc += w * src`.
// Reads outside the input (padding) are zero; PT/PL may be any non-negative padding.
${BINDINGS}

${STORE_FN}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox0 = gid.x * ${XT}u;
  let oy = gid.y;
  let os0 = (gid.z % ${SG}u) * ${ST}u;
  let ob = gid.z / ${SG}u;
  ${ACC_INIT}
  for (var ky = 0u; ky < ${KH}u; ky++) {
    let iy = i32(oy * ${SH}u + ky * ${DH}u) - ${PT};
    if (iy < 0 || iy >= ${IH}) { continue; }
    for (var kx = 0u; kx < ${KW}u; kx++) {
      let ix0 = i32(ox0 * ${SW}u + kx * ${DW}u) - ${PL};
      ${COLS}
      var wi = ((os0 * ${KH}u + ky) * ${KW}u + kx) * ${SI}u;
      var si = (ob * ${SI}u * ${IH}u + u32(iy)) * ${IW}u;
      for (var sl = 0u; sl < ${SI}u; sl++) {
        ${TAPS}
        wi += 1u;
        si += ${PLANE}u;
      }
    }
  }
  ${STORE}
}
