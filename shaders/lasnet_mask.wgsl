// LASNet sparse execution, step 1 (lowering/kernels/lasnet.py): the masker, the active-patch list and the pixels no
// conv will touch, in one workgroup (so the count needs no clearing between runs and no second dispatch).
// Cells: the masker as the model computes it (average over the cell's pixels per channel, dot with the 1x1 masker
// weights, plus bias, > threshold), 1 = active. Patches (P x P pixels): one with an active cell appends its id to
// `patches` through a workgroup counter; one without copies x to out over its pixels (the dense block's value there,
// x + branch * 0). Last, the count becomes the x count of the indirect dispatch that follows. KEEP: 0 the mask
// decides, 1 every patch runs (dense execution with the same kernels), 2 none does (for tuning/sparse.py).
// x and out: [H, W, C/4] vec4 (BHWC, batch 1).
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> masker: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> cells: array<u32>;
@group(0) @binding(3) var<storage, read_write> args: array<u32>;
@group(0) @binding(4) var<storage, read_write> patches: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;

const H: u32 = ${H}u;
const W: u32 = ${W}u;
const C4: u32 = ${C4}u;
const CELL: u32 = ${CELL}u;
const P: u32 = ${P}u;
const NPX: u32 = ${NPX}u;
const NP: u32 = ${NP}u;
const NCX: u32 = ${NCX}u;
const NCY: u32 = ${NCY}u;
const BIAS: f32 = ${BIAS};
const THRESHOLD: f32 = ${THRESHOLD};
const KEEP: u32 = ${KEEP}u;
const WG: u32 = ${WG}u;

var<workgroup> count: atomic<u32>;

@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicStore(&count, 0u);  // explicitly: not every WebGPU implementation zeroes workgroup memory
    }
    for (var cell = lid; cell < NCX * NCY; cell += WG) {
        let cy = cell / NCX;
        let cx = cell % NCX;
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
        cells[cell] = select(0u, 1u, logit + BIAS > THRESHOLD);
    }
    storageBarrier();  // the cells written above, read below
    workgroupBarrier();  // and the counter's zero
    for (var pid = lid; pid < NP; pid += WG) {
        let y0 = (pid / NPX) * P;
        let x0 = (pid % NPX) * P;
        let y1 = min(y0 + P, H);
        let x1 = min(x0 + P, W);
        var keep = KEEP == 1u;
        for (var cy = y0 / CELL; cy * CELL < y1; cy++) {
            for (var cx = x0 / CELL; cx * CELL < x1; cx++) {
                keep = keep || cells[cy * NCX + cx] != 0u;
            }
        }
        if (keep && KEEP != 2u) {
            patches[atomicAdd(&count, 1u)] = pid;
        } else {
            for (var y = y0; y < y1; y++) {
                for (var k = (y * W + x0) * C4; k < (y * W + x1) * C4; k++) {
                    out[k] = x[k];
                }
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u) {
        args[0] = atomicLoad(&count);
        args[1] = 1u;
        args[2] = 1u;
    }
}
