// MediaPipe MaxPoolingWithArgmax2D: one PHWC4 output vec4 per invocation, writing the max (`value`, with the
// fused clamp in the epilogue) and, per lane, the window offset of the first maximum as
// f32(fy * FW + fx) + 0.1 (fy, fx relative to the unclamped window, as in MediaPipe's CPU kernel).
${BINDINGS}

@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
  let ox = gid.x;
  let oy = gid.y;
  let os = gid.z % ${S}u;
  let ob = gid.z / ${S}u;
  let oi = ((ob * ${S}u + os) * ${H}u + oy) * ${W}u + ox;
  let y0 = i32(oy) * ${STRIDE_H} - ${PAD_T};
  let x0 = i32(ox) * ${STRIDE_W} - ${PAD_L};
  let fy0 = max(0, -y0);
  let fy1 = min(${FH}, ${IN_H} - y0);
  let fx0 = max(0, -x0);
  let fx1 = min(${FW}, ${IN_W} - x0);
  let base = (ob * ${S}u + os) * ${IN_H}u;
  var best = vec4<f32>(${LOWEST});
  var arg = vec4<f32>(0.0);
  for (var fy = fy0; fy < fy1; fy++) {
    let row = (base + u32(y0 + fy)) * ${IN_W}u;
    for (var fx = fx0; fx < fx1; fx++) {
      let v = src[row + u32(x0 + fx)];
      let better = v > best;
      best = select(best, v, better);
      arg = select(arg, vec4<f32>(f32(fy * ${FW} + fx)), better);
    }
  }
  let lanes = vec4<u32>(os * 4u) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(${C}u);
  indices[oi] = select(vec4<f32>(0.0), arg + vec4<f32>(0.1), lanes);
  var value = best;
  ${EPILOGUE}
  dst[oi] = value;
}
