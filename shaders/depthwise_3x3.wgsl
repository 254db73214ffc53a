// DEPTHWISE_CONV_2D 3x3, dilation 1, stride 1 or 2, multiplier 1: fully unrolled. Each invocation computes XT
// adjacent output columns of one slice; every input column of the window is loaded once and reused.
${BINDINGS}

${STORE_FN}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox0 = gid.x * ${XT}u;
  let oy = gid.y;
  let os = gid.z % ${SO}u;
  let ob = gid.z / ${SO}u;
  let iy_base = i32(oy * ${SH}u) - ${PT};
  let ix_base = i32(ox0 * ${SW}u) - ${PL};
  let base = (ob * ${SI}u + os) * ${PLANE}u;
  ${ACC_INIT}
  ${TAPS}
  ${STORE}
}
