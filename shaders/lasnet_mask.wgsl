// LASNet sparse execution, step 1 (lowering/kernels/lasnet.py): the masker and the active-patch list. One invocation
// per execution patch (P x P pixels): each masker cell the patch overlaps is computed as the model does (average over
// the cell's pixels per channel, dot with the 1x1 masker weights, plus bias, > threshold) and stored in cells
// (1 = active; a cell shared by several patches is written the same by each); a patch with an active cell appends
// its id to `patches` through the atomic counter, which step 2 turns into the indirect dispatch's count; a patch
// without one copies x to out over its pixels (the dense block's value there, x + branch * 0). KEEP: 0 the mask
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
const BIAS: f32 = ${BIAS};
const THRESHOLD: f32 = ${THRESHOLD};
const KEEP: u32 = ${KEEP}u;

fn at(y: u32, x: u32, s: u32) -> u32 {
    return ${AT};
}

@compute @workgroup_size(${WG_X})
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
                        sum += vec4<f32>(x[at(cy * CELL + yy, cx * CELL + xx, i)]);
                    }
                }
                logit += dot(sum / f32(CELL * CELL), vec4<f32>(masker[i]));
            }
            let on = logit + BIAS > THRESHOLD;
            cells[cy * NCX + cx] = select(0u, 1u, on);
            keep = keep || on;
        }
    }
    if (keep && KEEP != 2u) {
        let slot = atomicAdd(&count[0], 1u);
        if (slot < NP) {
            patches[slot] = pid;
        }
    } else {
        for (var y = y0; y < y1; y++) {
            for (var xx = x0; xx < x1; xx++) {
                for (var s = 0u; s < C4; s++) {
                    out[at(y, xx, s)] = D4(x[at(y, xx, s)]);
                }
            }
        }
    }
}
