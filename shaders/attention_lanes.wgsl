// ATTENTION, flash-decoding with subgroups: one workgroup a tile = (row, chunk c of the keys up to the row's end,
// KEY_END: all N keys, or for a mask made from the position only the keys it leaves unmasked). Its WG_X
// invocations are GROUPS key groups of LANES lanes: lane l holds the query slices l, l + LANES, ... (A of them) and
// the matching value slices (B), so no invocation reads a whole key or value row. A key group takes 4 keys at a time
// (block b of the chunk, interleaved over the groups): each lane's partial dot products, summed over the group's
// lanes by subgroup shuffles (LANE_SPAN: then across subgroups through workgroup memory where a key group spans
// several, on adapters whose subgroups are smaller than LANES; never for 4 lanes), give the 4 scores; one
// online-softmax step per block (running maximum and sum), each lane rescaling and adding its value slices. The key
// groups' states are then merged lane by lane (subgroup shuffles, then workgroup memory across subgroups, each slice
// by PART_R adjacent invocations), the tile's state goes to `partials` and the last tile of a row merges them
// (attention/merge_lanes.wgsl: each slice by MERGE_R adjacent invocations over the chunks, then shuffles). The loop
// bounds are uniform in the workgroup (from the workgroup id and the ends read through workgroupUniformLoad), as
// the shuffles inside need.
${BINDINGS}

${READERS}
#include "attention/operands.wgsl"


fn store(v: vec4<f32>, i0: u32, i1: u32, m: u32, ns: u32) {
  ${LOCATE}
#include "store_value.wgsl"

${KEY_END}

var<workgroup> key_end_shared: u32;
var<workgroup> part_ml: array<vec2<f32>, ${PART_STATES}>;
var<workgroup> part_acc: array<vec4<f32>, ${PART_VEC4S}>;
var<workgroup> last_tile: u32;
${DOTS_MEMORY}

@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32,
        @builtin(subgroup_id) sg_id: u32) {
  let pos = sg_id * sg_size + sg_lane;
  let lane = pos % ${LANES}u;
  let kg = pos / ${LANES}u;
  let tile = wid.x + wid.y * ${DISPATCH_X}u;
  let t = min(tile, ${TILES_LAST}u);
  let row = t / ${CHUNKS}u;
  let c = t % ${CHUNKS}u;
  let has_row = tile < ${TILES}u;
  let m = row % ${M}u;
  let bi = row / ${M}u;
  let i0 = bi / ${B1}u;
  let i1 = bi % ${B1}u;
  let kv1 = ${KV};
  if (li == 0u) {
    key_end_shared = key_end();
  }
  let end = workgroupUniformLoad(&key_end_shared);
  let per = (end + ${CHUNKS_LAST}u) / ${CHUNKS}u;
  let start = min(c * per, end);
  let stop = min(start + per, end);
  let blocks = (stop - start + ${BLOCK_KEYS_LAST}u) / ${BLOCK_KEYS}u;
  var q: array<vec4<f32>, ${A}>;
  for (var i = 0u; i < ${A}u; i++) {
    let s = lane + i * ${LANES}u;
    q[i] = select(vec4<f32>(0.0), xq_at(i0, i1, m, min(s, ${DS_LAST}u)), s < ${DS}u);
  }
  var mx = ${LOWEST};
  var total = 0.0;
  var acc: array<vec4<f32>, ${B}>;
  let scale = ${SCALE};
  for (var b = 0u; b < blocks; b++) {
    let n0 = start + (b * ${GROUPS}u + kg) * 4u;
    let last = max(stop, 1u) - 1u;
    let keys = vec4<u32>(n0, min(n0 + 1u, last), min(n0 + 2u, last), min(n0 + 3u, last));
    var dots = vec4<f32>(0.0);
    var masks = vec4<f32>(0.0);
    if (n0 < stop) {
      for (var i = 0u; i < ${A}u; i++) {
        let s = min(lane + i * ${LANES}u, ${DS_LAST}u);
        dots += vec4<f32>(dot(q[i], key_at(i0, kv1, keys.x, s)), dot(q[i], key_at(i0, kv1, keys.y, s)),
                          dot(q[i], key_at(i0, kv1, keys.z, s)), dot(q[i], key_at(i0, kv1, keys.w, s)));
      }
      masks = vec4<f32>(mask_at(i0, i1, m, keys.x), mask_at(i0, i1, m, keys.y), mask_at(i0, i1, m, keys.z),
                        mask_at(i0, i1, m, keys.w));
    }
    for (var o = 1u; o < min(${LANES}u, sg_size); o = o << 1u) {
      dots += subgroupShuffleXor(dots, o);
    }
    ${LANE_SPAN}
    let valid = vec4<u32>(n0, n0 + 1u, n0 + 2u, n0 + 3u) < vec4<u32>(stop);
    let scores = select(vec4<f32>(${LOWEST}), dots * scale + masks, valid);
    let top = max(mx, max(max(scores.x, scores.y), max(scores.z, scores.w)));
    let corr = exp(mx - top);
    let p = select(vec4<f32>(0.0), exp(scores - vec4<f32>(top)), valid);
    total = total * corr + (p.x + p.y + p.z + p.w);
    if (n0 < stop) {
      for (var i = 0u; i < ${B}u; i++) {
        let s = min(lane + i * ${LANES}u, ${VS_LAST}u);
        acc[i] = acc[i] * corr + p.x * value_at(i0, kv1, keys.x, s) + p.y * value_at(i0, kv1, keys.y, s)
                 + p.z * value_at(i0, kv1, keys.z, s) + p.w * value_at(i0, kv1, keys.w, s);
      }
    }
    mx = top;
  }
  // the key groups' states, lane by lane: within a subgroup by shuffles
  for (var o = ${LANES}u; o < min(${WG_X}u, sg_size); o = o << 1u) {
    let other = subgroupShuffleXor(vec2<f32>(mx, total), o);
    let top = max(mx, other.x);
    let a = exp(mx - top);
    let w = exp(other.x - top);
    total = total * a + other.y * w;
    for (var i = 0u; i < ${B}u; i++) {
      acc[i] = acc[i] * a + subgroupShuffleXor(acc[i], o) * w;
    }
    mx = top;
  }
  // then across subgroups (or key groups spanning several): the first key group of each stores its state in
  // workgroup memory; slice s of the tile's state is made by PART_R adjacent invocations, each adding every
  // PART_R-th state rescaled to their common maximum, summed by shuffles, and stored to `partials`
  let span = max(${LANES}u, sg_size);
  let parts = ${WG_X}u / span;
  let base = 1u + (row * ${CHUNKS}u + c) * ${STATE}u;
  if (parts > 1u && pos % span < ${LANES}u) {
    let at = pos / span * ${LANES}u + lane;
    part_ml[at] = vec2<f32>(mx, total);
    for (var i = 0u; i < ${B}u; i++) { part_acc[at * ${B}u + i] = acc[i]; }
  }
  workgroupBarrier();
  if (parts > 1u) {
    for (var t0 = 0u; t0 < ${VS}u * ${PART_R}u; t0 += ${WG_X}u) {
      let t = t0 + pos;
      let s = min(t / ${PART_R}u, ${VS_LAST}u);
      let r = t % ${PART_R}u;
      let l = s % ${LANES}u;
      var top = ${LOWEST};
      for (var j = 0u; j < parts; j++) { top = max(top, part_ml[j * ${LANES}u + l].x); }
      var weights = 0.0;
      var merged = vec4<f32>(0.0);
      for (var j = r; j < parts; j += ${PART_R}u) {
        let at = j * ${LANES}u + l;
        let state = part_ml[at];
        let w = exp(state.x - top);
        weights += state.y * w;
        merged += part_acc[at * ${B}u + s / ${LANES}u] * w;
      }
      for (var o = 1u; o < ${PART_R}u; o = o << 1u) {
        weights += subgroupShuffleXor(weights, o);
        merged += subgroupShuffleXor(merged, o);
      }
      if (r == 0u && t / ${PART_R}u < ${VS}u && has_row) {
        if (s == 0u) {
          partials[base] = vec4<f32>(top, weights, 0.0, 0.0);
        }
        partials[base + 1u + s] = merged;
      }
    }
  } else if (pos < ${LANES}u && has_row) {
    if (lane == 0u) {
      partials[base] = vec4<f32>(mx, total, 0.0, 0.0);
    }
    for (var i = 0u; i < ${B}u; i++) {
      let s = lane + i * ${LANES}u;
      if (s < ${VS}u) { partials[base + 1u + s] = acc[i]; }
    }
  }
  #include "attention/merge_lanes.wgsl"
}
