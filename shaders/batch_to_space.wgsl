// BATCH_TO_SPACE_ND: out[b, y, x] = in[(dy * BW + dx) * B + b, Y / BH, X / BW] with Y = y + TOP, X = x + LEFT,
// dy = Y % BH, dx = X % BW (crops skip the first TOP rows / LEFT columns). One PHWC4 vec4 per invocation.
${BINDINGS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  let y = oy + ${TOP}u;
  let x = ox + ${LEFT}u;
  let ib = ((y % ${BH}u) * ${BW}u + x % ${BW}u) * ${B}u + ob;
  var value = vec4<f32>(src[((ib * ${S}u + os) * ${IH}u + y / ${BH}u) * ${IW}u + x / ${BW}u]);
  ${EPILOGUE}
  dst[oi] = D4(value);
}
