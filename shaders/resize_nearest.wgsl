// RESIZE_NEAREST_NEIGHBOR: one PHWC4 output vec4 per invocation, copied from the source pixel whose row
// (column) index the host computed into tab[y].x (tab[H + x].x) with TFLite's float32 rounding.
${BINDINGS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  let iy = u32(tab[oy].x);
  let ix = u32(tab[${H}u + ox].x);
  var value = vec4<f32>(src[((ob * ${S}u + os) * ${IH}u + iy) * ${IW}u + ix]);
  ${EPILOGUE}
  dst[oi] = D4(value);
}
