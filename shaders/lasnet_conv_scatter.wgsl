// LASNet sparse execution, step 3 (lowering/kernels/lasnet.py): the block's second 3x3 conv on the active patches,
// reading the first conv's patch-plus-halo from tmp, then the block's tail fused in: times the mask (the cell's
// flag from step 1) plus the residual x, scattered to the patch's pixels of out. One workgroup per active patch,
// dispatched indirectly. Pixels of inactive patches keep out = x (copied before step 1): the dense block's value
// there, x + branch * 0.
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> weights: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> patches: array<u32>;
@group(0) @binding(4) var<storage, read> tmp: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> cells: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<vec4<f32>>;

const H: u32 = ${H}u;
const W: u32 = ${W}u;
const C4: u32 = ${C4}u;
const CELL: u32 = ${CELL}u;
const NCX: u32 = ${NCX}u;
const P: u32 = ${P}u;
const R: u32 = ${P}u + 2u;
const NPX: u32 = ${NPX}u;
const TX: u32 = ${TX}u;
const SEG: u32 = (P + TX - 1u) / TX;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = wg.x;
    let pid = patches[slot];
    let py = (pid / NPX) * P;
    let px = (pid % NPX) * P;
    // one invocation per TX pixels of a row of the patch and 4 output channels (as the gather conv)
    for (var job = lid; job < P * SEG * C4; job += 64u) {
        let o4 = job % C4;
        let item = job / C4;
        let qy = item / SEG;
        let qx0 = (item % SEG) * TX;
        let y = py + qy;
        if (y >= H) {
            continue;
        }
        var acc = array<vec4<f32>, ${TX}>();  // [TX] of output slice o4, zeroed explicitly on every job
        for (var t = 0u; t < TX; t++) {
            acc[t] = bias[o4];
        }
        for (var ky = 0u; ky < 3u; ky++) {
            for (var kx = 0u; kx < 3u; kx++) {
                let tap = (ky * 3u + kx) * C4;
                for (var i = 0u; i < C4; i++) {
                    var v = array<vec4<f32>, ${TX}>();
                    for (var t = 0u; t < TX; t++) {
                        let qx = min(qx0 + t, P - 1u);  // past the patch: computed, never stored
                        v[t] = tmp[(slot * R * R + (qy + ky) * R + qx + kx) * C4 + i];
                    }
                    #include "lasnet/accumulate_tap.wgsl"
                }
            }
        }
        for (var t = 0u; t < TX; t++) {
            let qx = qx0 + t;
            let xx = px + qx;
            if (qx >= P || xx >= W) {
                break;
            }
            let mask = f32(cells[(y / CELL) * NCX + xx / CELL]);
            let at = (y * W + xx) * C4 + o4;
            out[at] = x[at] + acc[t] * mask;
        }
    }
}
