// SOFTMAX / LOG_SOFTMAX / L2_NORMALIZATION over the channel (last) axis: one invocation per pixel reading
// its ${S} slices (max pass, sum pass, write pass). Padding lanes of the last slice are masked out of the max
// and the sum and written as zeros. The per-op math is baked: NEEDS_MAX, SUM_TERM(v, mx), PREPARE(total), OUT(v).
${BINDINGS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let ob = gid.z;
  let plane = ${H}u * ${W}u;
  let base = ob * ${S}u * plane + oy * ${W}u + ox;
  let last_mask = ${LAST_MASK};
  var m = vec4<f32>(${LOWEST});
  if (${NEEDS_MAX}) {
    for (var s = 0u; s < ${S}u; s++) {
      var v = src[base + s * plane];
      if (s == ${S}u - 1u) { v = select(vec4<f32>(${LOWEST}), v, last_mask); }
      m = max(m, v);
    }
  }
  let mx = max(max(m.x, m.y), max(m.z, m.w));
  var acc = vec4<f32>(0.0);
  for (var s = 0u; s < ${S}u; s++) {
    let v = src[base + s * plane];
    var t = ${SUM_TERM};
    if (s == ${S}u - 1u) { t = select(vec4<f32>(0.0), t, last_mask); }
    acc += t;
  }
  let total = acc.x + acc.y + acc.z + acc.w;
  ${PREPARE}
  for (var os = 0u; os < ${S}u; os++) {
    let oi = base + os * plane;
    let v = src[oi];
    var value = ${OUT};
    ${EPILOGUE}
    dst[oi] = value;
  }
}
