// LASNet sparse execution, step 1 (lowering/kernels/lasnet.py): the masker and the active-patch list, on the GPU.
// One invocation per execution patch (P x P pixels): each masker cell the patch overlaps is computed as the model
// does (average over the cell's pixels per channel, dot with the 1x1 masker weights, plus bias, > threshold) and
// stored in cells (1 = active); a patch with an active cell appends its id to patches through an atomic counter,
// which is also the x count of the indirect dispatches that follow. KEEP: 0 the mask decides, 1 every patch (dense
// execution with the same kernels), 2 no patch (what the block costs besides its convs, for tuning/sparse.py).
// x: [H, W, C/4] vec4 (BHWC, batch 1).
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> masker: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> cells: array<u32>;
@group(0) @binding(3) var<storage, read_write> args: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> patches: array<u32>;

const H: u32 = ${H}u;
const W: u32 = ${W}u;
const C4: u32 = ${C4}u;
const CELL: u32 = ${CELL}u;
const P: u32 = ${P}u;
const NPX: u32 = ${NPX}u;
const NP: u32 = ${NP}u;
const NCX: u32 = ${NCX}u;
const BIAS: f32 = ${BIAS};
const THRESHOLD: f32 = ${THRESHOLD};
const KEEP: u32 = ${KEEP}u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let pid = gid.x;
    if (pid >= NP) {
        return;
    }
    let y0 = (pid / NPX) * P;
    let x0 = (pid % NPX) * P;
    let y1 = min(y0 + P, H);
    let x1 = min(x0 + P, W);
    var keep = KEEP == 1u;
    for (var cy = y0 / CELL; cy * CELL < y1; cy++) {
        for (var cx = x0 / CELL; cx * CELL < x1; cx++) {
            var logit = 0.0;
            for (var i = 0u; i < C4; i++) {
                var sum = vec4<f32>(0.0);
                for (var yy = 0u; yy < CELL; yy++) {
                    for (var xx = 0u; xx < CELL; xx++) {
                        sum += x[((cy * CELL + yy) * W + cx * CELL + xx) * C4 + i];
                    }
                }
                logit += dot(sum / f32(CELL * CELL), masker[i]);
            }
            let on = logit + BIAS > THRESHOLD;
            cells[cy * NCX + cx] = select(0u, 1u, on);
            keep = keep || on;
        }
    }
    if (keep && KEEP != 2u) {
        let slot = atomicAdd(&args[0], 1u);
        patches[slot] = pid;
    }
}
