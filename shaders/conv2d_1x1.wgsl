// CONV_2D 1x1, stride 1, no padding: a GEMM over the H*W pixels of each batch. Each invocation computes XT
// consecutive pixels x ST output slices; weights are mat4x4 blocks [out_slice][in_slice].
${BINDINGS}

${STORE_FN}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let p0 = gid.x * ${XT}u;
  let os0 = (gid.z % ${SG}u) * ${ST}u;
  let ob = gid.z / ${SG}u;
  ${PIX}
  ${ACC_INIT}
  var wi = os0 * ${SI}u;
  var si = ob * ${SI}u * ${PLANE}u;
  for (var sl = 0u; sl < ${SI}u; sl++) {
    ${TAPS}
    wi += 1u;
    si += ${PLANE}u;
  }
  ${STORE}
}
