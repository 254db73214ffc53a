// CONV_2D with one input slice (1..4 input channels, typical first layers): every tap is unrolled; each input
// vec4 feeds XT output columns x ST output slices. Weights are mat4x4 blocks [out_slice][ky][kx].
${BINDINGS}

${STORE_FN}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox0 = gid.x * ${XT}u;
  let oy = gid.y;
  let os0 = (gid.z % ${SG}u) * ${ST}u;
  let ob = gid.z / ${SG}u;
  let iy0 = i32(oy * ${SH}u) - ${PT};
  let ix0 = i32(ox0 * ${SW}u) - ${PL};
  let base = ob * ${IH}u * ${IW}u;
  let wi = os0 * ${KH}u * ${KW}u;
  ${ACC_INIT}
  ${TAPS}
  ${STORE}
}
