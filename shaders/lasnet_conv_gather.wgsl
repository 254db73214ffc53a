// LASNet sparse execution, step 2 (lowering/kernels/lasnet.py): the block's first 3x3 conv on the active patches
// only, the gather fused in (it reads x where the patch lies). One workgroup per active patch, dispatched
// indirectly (x count = the patches step 1 listed). It computes the patch and a one-pixel halo (R = P + 2 per side,
// what the second 3x3 conv reads), zero outside the image (SAME padding of the second conv), into the patch's
// slot of tmp: [slot, R, R, C/4]. Weights OHWI: output channel o, tap t, input slice i at (o * 9 + t) * C/4 + i.
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> weights: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> patches: array<u32>;
@group(0) @binding(4) var<storage, read_write> tmp: array<vec4<f32>>;

const H: i32 = ${H};
const W: i32 = ${W};
const C4: u32 = ${C4}u;
const P: u32 = ${P}u;
const R: u32 = ${P}u + 2u;
const NPX: u32 = ${NPX}u;
const RELU: bool = ${RELU};

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = wg.x;
    let pid = patches[slot];
    let py = i32((pid / NPX) * P) - 1;
    let px = i32((pid % NPX) * P) - 1;
    // one invocation per pixel of the patch and its halo, all output channels: each input vec4 read once
    for (var r = lid; r < R * R; r += 64u) {
        let y = py + i32(r / R);
        let xx = px + i32(r % R);
        var acc = array<vec4<f32>, ${C4}>();  // zeroed explicitly on every pixel
        if (y >= 0 && y < H && xx >= 0 && xx < W) {
            for (var o4 = 0u; o4 < C4; o4++) {
                acc[o4] = bias[o4];
            }
            for (var ky = 0; ky < 3; ky++) {
                let iy = y + ky - 1;
                if (iy < 0 || iy >= H) {
                    continue;
                }
                for (var kx = 0; kx < 3; kx++) {
                    let ix = xx + kx - 1;
                    if (ix < 0 || ix >= W) {
                        continue;
                    }
                    let base = u32(iy * W + ix) * C4;
                    let tap = u32(ky * 3 + kx) * C4;
                    for (var i = 0u; i < C4; i++) {
                        let v = x[base + i];
                        for (var o4 = 0u; o4 < C4; o4++) {
                            let k = o4 * 36u * C4 + tap + i;
                            acc[o4] += vec4<f32>(dot(weights[k], v), dot(weights[k + 9u * C4], v),
                                                 dot(weights[k + 18u * C4], v), dot(weights[k + 27u * C4], v));
                        }
                    }
                }
            }
            if (RELU) {
                for (var o4 = 0u; o4 < C4; o4++) {
                    acc[o4] = max(acc[o4], vec4<f32>(0.0));
                }
            }
        }
        for (var o4 = 0u; o4 < C4; o4++) {
            tmp[(slot * R * R + r) * C4 + o4] = acc[o4];
        }
    }
}
