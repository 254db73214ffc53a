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
const TX: u32 = ${TX}u;
const SEG: u32 = (R + TX - 1u) / TX;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slot = wg.x;
    let pid = patches[slot];
    let py = i32((pid / NPX) * P) - 1;
    let px = i32((pid % NPX) * P) - 1;
    // one invocation per TX pixels of a row of the patch and its halo, 4 output channels (a slice): each weight vec4
    // loaded once for the TX pixels
    for (var job = lid; job < R * SEG * C4; job += 64u) {
        let o4 = job % C4;
        let item = job / C4;
        let ry = item / SEG;
        let rx0 = (item % SEG) * TX;
        let y = py + i32(ry);
        var acc = array<vec4<f32>, ${TX}>();  // [TX] of output slice o4, zeroed explicitly on every job
        if (y >= 0 && y < H) {
            for (var t = 0u; t < TX; t++) {
                acc[t] = bias[o4];
            }
            for (var ky = 0; ky < 3; ky++) {
                let iy = y + ky - 1;
                if (iy < 0 || iy >= H) {
                    continue;
                }
                for (var kx = 0; kx < 3; kx++) {
                    let tap = u32(ky * 3 + kx) * C4;
                    for (var i = 0u; i < C4; i++) {
                        var v = array<vec4<f32>, ${TX}>();
                        for (var t = 0u; t < TX; t++) {
                            let ix = px + i32(rx0 + t) + kx - 1;
                            if (ix >= 0 && ix < W) {
                                v[t] = x[u32(iy * W + ix) * C4 + i];
                            }
                        }
                        #include "lasnet/accumulate_tap.wgsl"
                    }
                }
            }
        }
        for (var t = 0u; t < TX; t++) {
            let rx = rx0 + t;
            let xx = px + i32(rx);
            if (rx >= R) {
                break;
            }
            let inside = y >= 0 && y < H && xx >= 0 && xx < W;
            var value = select(vec4<f32>(0.0), acc[t], inside);
            if (RELU) {
                value = max(value, vec4<f32>(0.0));
            }
            tmp[(slot * R * R + ry * R + rx) * C4 + o4] = value;
        }
    }
}
