// LASNet sparse execution, step 1 (lowering/kernels/lasnet.py): the masker, the active-patch list and the pixels no
// conv will touch, in one workgroup (so the count needs no clearing between runs and no second dispatch).
// Cells: the masker as the model computes it (average over the cell's pixels per channel, dot with the 1x1 masker
// weights, plus bias, > threshold), 1 = active. Patches (P x P pixels), WG at a time: one with an active cell is
// listed in `patches` at its rank among the active ones (a prefix sum of the flags in workgroup memory: the list in
// patch order); one without copies x to out over its pixels (the dense block's value there, x + branch * 0).
// Last, the count becomes the x count of the indirect dispatch that follows. KEEP: 0 the mask
// decides, 1 every patch runs (dense execution with the same kernels), 2 none does (for tuning/sparse.py).
// x and out: [1, H, W, C] in the layout `at` gives (BHWC for the runner's own buffers, PHWC4 in a program).
${BINDINGS}

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
const WG: u32 = ${WG_X}u;

var<workgroup> flags: array<u32, ${WG_X}>;  // this round's patches: 1 = listed
var<workgroup> listed: u32;  // patches listed in the rounds before

fn at(y: u32, x: u32, s: u32) -> u32 {
    return ${AT};
}

@compute @workgroup_size(${WG_X})
fn main(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        listed = 0u;
    }
    for (var cell = lid; cell < NCX * NCY; cell += WG) {
        let cy = cell / NCX;
        let cx = cell % NCX;
        var logit = 0.0;
        for (var i = 0u; i < C4; i++) {
            var sum = vec4<f32>(0.0);
            for (var yy = 0u; yy < CELL; yy++) {
                for (var xx = 0u; xx < CELL; xx++) {
                    sum += vec4<f32>(x[at(cy * CELL + yy, cx * CELL + xx, i)]);
                }
            }
            logit += dot(sum / f32(CELL * CELL), vec4<f32>(masker[i]));
        }
        cells[cell] = select(0u, 1u, logit + BIAS > THRESHOLD);
    }
    storageBarrier();  // the cells written above, read below
    workgroupBarrier();  // and listed's zero
    for (var first = 0u; first < NP; first += WG) {
        let pid = first + lid;
        var keep = false;
        if (pid < NP) {
            let y0 = (pid / NPX) * P;
            let x0 = (pid % NPX) * P;
            let y1 = min(y0 + P, H);
            let x1 = min(x0 + P, W);
            keep = KEEP == 1u;
            for (var cy = y0 / CELL; cy * CELL < y1; cy++) {
                for (var cx = x0 / CELL; cx * CELL < x1; cx++) {
                    keep = keep || cells[cy * NCX + cx] != 0u;
                }
            }
            keep = keep && KEEP != 2u;
            if (!keep) {
                for (var y = y0; y < y1; y++) {
                    for (var xx = x0; xx < x1; xx++) {
                        for (var s = 0u; s < C4; s++) {
                            out[at(y, xx, s)] = D4(x[at(y, xx, s)]);
                        }
                    }
                }
            }
        }
        flags[lid] = select(0u, 1u, keep);
        workgroupBarrier();
        if (keep) {
            var slot = listed;
            for (var j = 0u; j < lid; j++) {
                slot += flags[j];
            }
            patches[slot] = pid;
        }
        workgroupBarrier();
        if (lid == 0u) {
            var total = listed;
            for (var j = 0u; j < WG; j++) {
                total += flags[j];
            }
            listed = total;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        args[0] = listed;
        args[1] = 1u;
        args[2] = 1u;
    }
}
