// Next-token sampler of a decode loop that stays on the GPU (gpuengine/kernels/sampler.py).
// One workgroup: the top-k logits by rounds of a workgroup argmax (order: larger logit first, then the lower id),
// then on lane 0: temperature, top-p over the sorted top-k, a draw from a PCG hash of (seed, step), and the
// writes: the token (exact f32) where the next decode step's `tokens` input reads it, the position advanced by
// one, the token appended to the history the host reads back, the step counter advanced.
// state (u32): [0] step, [1] seed, [2] top_k, [3] top_p (f32 bits), [4] temperature (f32 bits),
//              [5] the token and [6] the position written for the next step (f32 bits: copied back into
//              `tokens` / `position` when this loop resumes after another session's), [7] 1: only the tokens whose
//              bit is set in `allowed` (a constrained decoder's bitmask, bit j % 32 of word j / 32) are candidates,
//              [HISTORY + s] the token of step s.

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> tokens: array<f32>;
@group(0) @binding(2) var<storage, read_write> position: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<u32>;
@group(0) @binding(4) var<storage, read> allowed: array<u32>;

const VOCAB: u32 = ${VOCAB}u;
const MAX_K: u32 = ${MAX_K}u;
const LANES: u32 = ${LANES}u;
const HISTORY: u32 = ${HISTORY}u;
const NONE: u32 = 0xffffffffu;

var<workgroup> lane_value: array<f32, ${LANES}>;
var<workgroup> lane_index: array<u32, ${LANES}>;
var<workgroup> top_value: array<f32, ${MAX_K}>;
var<workgroup> top_index: array<u32, ${MAX_K}>;
var<workgroup> top_k_count: u32;  // k read once, loaded as a uniform value: the rounds' barriers need uniform control flow

fn pcg(v: u32) -> u32 {
    let s = v * 747796405u + 2891336453u;
    let word = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;
    return (word >> 22u) ^ word;
}

// a before b: the larger logit, then the lower id (NaN never comes first)
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    return ia != NONE && (ib == NONE || va > vb || (va == vb && ia < ib));
}

@compute @workgroup_size(${LANES})
fn main(@builtin(local_invocation_index) lane: u32) {
    if (lane == 0u) {
        top_k_count = clamp(state[2], 1u, MAX_K);
    }
    let k = workgroupUniformLoad(&top_k_count);
    let masked = state[7] != 0u;
    var prev_value = 0.0;
    var prev_index = NONE;
    for (var r = 0u; r < k; r = r + 1u) {
        var best_value = 0.0;
        var best_index = NONE;
        for (var j = lane; j < VOCAB; j = j + LANES) {
            let x = logits[j];
            if (masked && ((allowed[j >> 5u] >> (j & 31u)) & 1u) == 0u) {
                continue;
            }
            let after_prev = prev_index == NONE || before(prev_value, prev_index, x, j);
            if (x == x && after_prev && before(x, j, best_value, best_index)) {
                best_value = x;
                best_index = j;
            }
        }
        lane_value[lane] = best_value;
        lane_index[lane] = best_index;
        workgroupBarrier();
        for (var stride = LANES / 2u; stride > 0u; stride = stride / 2u) {
            if (lane < stride && before(lane_value[lane + stride], lane_index[lane + stride], lane_value[lane],
                                        lane_index[lane])) {
                lane_value[lane] = lane_value[lane + stride];
                lane_index[lane] = lane_index[lane + stride];
            }
            workgroupBarrier();
        }
        prev_value = lane_value[0];
        prev_index = lane_index[0];
        if (lane == 0u) {
            top_value[r] = prev_value;
            top_index[r] = prev_index;
        }
        workgroupBarrier();
    }
    if (lane != 0u) {
        return;
    }
    let step = state[0];
    let top_p = bitcast<f32>(state[3]);
    let temperature = bitcast<f32>(state[4]);
    var choice = top_index[0];
    if (temperature > 0.0 && k > 1u) {
        var total = 0.0;
        for (var r = 0u; r < k; r = r + 1u) {
            if (top_index[r] != NONE) {
                total = total + exp((top_value[r] - top_value[0]) / temperature);
            }
        }
        // top-p: the fewest most likely tokens whose probability reaches top_p (at least one)
        var kept = 0u;
        var mass = 0.0;
        for (var r = 0u; r < k; r = r + 1u) {
            if (top_index[r] == NONE) {
                break;
            }
            mass = mass + exp((top_value[r] - top_value[0]) / temperature);
            kept = r + 1u;
            if (mass >= top_p * total) {
                break;
            }
        }
        let u = f32(pcg(state[1] ^ pcg(step)) >> 8u) * (1.0 / 16777216.0);
        let goal = u * mass;
        var running = 0.0;
        choice = top_index[kept - 1u];
        for (var r = 0u; r < kept; r = r + 1u) {
            running = running + exp((top_value[r] - top_value[0]) / temperature);
            if (running > goal) {
                choice = top_index[r];
                break;
            }
        }
    }
    let next_position = position[0] + 1.0;
    tokens[0] = f32(choice);
    position[0] = next_position;
    state[5] = bitcast<u32>(f32(choice));
    state[6] = bitcast<u32>(next_position);
    if (HISTORY + step < arrayLength(&state)) {
        state[HISTORY + step] = choice;
    }
    state[0] = step + 1u;
}
