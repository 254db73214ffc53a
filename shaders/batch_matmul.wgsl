// BATCH_MATMUL: one output vec4 (4 adjacent n) per invocation for row m of batch (i0, i1). Each step takes 4 k:
// A_EXPR is X[m, 4k4..4k4+3], B_EXPR the mat4x4 whose column j is Y[4k4+j, 4os..4os+3]; generated readers bake
// each operand's rank, broadcasting and adjacency.
${BINDINGS}

${READERS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let m = gid.x;
  let i0 = gid.y / ${B1}u;
  let i1 = gid.y % ${B1}u;
  let os = gid.z;
  var acc = vec4<f32>(0.0);
  for (var k4 = 0u; k4 < ${KS}u; k4++) {
    acc += ${B_EXPR} * ${A_EXPR};
  }
  let ob = ${LOC_B};
  let oy = ${LOC_Y};
  let ox = ${LOC_X};
  let oi = ((ob * ${SO}u + os) * ${OH}u + oy) * ${OW}u + ox;
  var value = acc;
  ${EPILOGUE}
  dst[oi] = value;
}
