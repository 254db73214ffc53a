// LASNet sparse execution, step 3 (lowering/kernels/lasnet.py): the block's two 3x3 convs on one active patch per
// workgroup, dispatched indirectly (x count = the patches step 1 listed, from step 2). The gather fused in: x around
// the patch (two pixels of halo, zero outside the image: SAME padding) into workgroup memory xin; the first conv over the
// patch plus one pixel of halo (what the second conv reads; zero outside the image) into mid; the second conv over
// the patch, then the block's tail: times the mask (the cell's flag from step 1) plus x, scattered to the patch's
// pixels of out. Each conv job is a row segment of T pixels of one output slice (accumulators a0..); weights are
// mat4x4 blocks [out slice][tap][in slice] of four vec4 columns (`m * v` adds a tap's input slice to the 4 output
// channels). x and out in the layout `at` gives (BHWC for the runner's own buffers, PHWC4 in a program).
${BINDINGS}

const H: i32 = ${H};
const W: i32 = ${W};
const C4: u32 = ${C4}u;
const CELL: u32 = ${CELL}u;
const NCX: u32 = ${NCX}u;
const P: u32 = ${P}u;
const NPX: u32 = ${NPX}u;
const RELU: bool = ${RELU};
const WG: u32 = ${WG_X}u;
const XS: u32 = P + 4u;  // side of the gathered input
const R: u32 = P + 2u;  // side of the first conv's output
const T1: u32 = ${T1}u;
const SEG1: u32 = (R + T1 - 1u) / T1;
const T2: u32 = ${T2}u;
const SEG2: u32 = (P + T2 - 1u) / T2;

var<workgroup> xin: array<vec4<f32>, ${XIN}>;  // [XS, XS, C4]: x from (py - 2, px - 2)
var<workgroup> mid: array<vec4<f32>, ${MID}>;  // [R, R, C4]: the first conv from (py - 1, px - 1)

fn at(y: u32, x: u32, s: u32) -> u32 {
    return ${AT};
}

@compute @workgroup_size(${WG_X})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let pid = patches[wg.x];
    let py = i32((pid / NPX) * P);
    let px = i32((pid % NPX) * P);
    for (var k = lid; k < XS * XS * C4; k += WG) {
        let pixel = k / C4;
        let y = py - 2 + i32(pixel / XS);
        let xx = px - 2 + i32(pixel % XS);
        var v = vec4<f32>(0.0);
        if (y >= 0 && y < H && xx >= 0 && xx < W) {
            v = vec4<f32>(x[at(u32(y), u32(xx), k % C4)]);
        }
        xin[k] = v;
    }
    workgroupBarrier();
    for (var job = lid; job < R * SEG1 * C4; job += WG) {
        let o4 = job % C4;
        let item = job / C4;
        let ry = item / SEG1;
        let c0 = (item % SEG1) * T1;
        let b = vec4<f32>(b1[o4]);
        ${ACC1}
        for (var ky = 0u; ky < 3u; ky++) {
            for (var i = 0u; i < C4; i++) {
                ${CONV1}
            }
        }
        let acc = array<vec4<f32>, T1>(${ACCS1});
        let y = py - 1 + i32(ry);
        for (var t = 0u; t < T1; t++) {
            let rx = c0 + t;
            let xx = px - 1 + i32(rx);
            if (rx < R) {
                var value = select(vec4<f32>(0.0), acc[t], y >= 0 && y < H && xx >= 0 && xx < W);
                if (RELU) {
                    value = max(value, vec4<f32>(0.0));
                }
                mid[(ry * R + rx) * C4 + o4] = value;
            }
        }
    }
    workgroupBarrier();
    for (var job = lid; job < P * SEG2 * C4; job += WG) {
        let o4 = job % C4;
        let item = job / C4;
        let qy = item / SEG2;
        let c0 = (item % SEG2) * T2;
        let b = vec4<f32>(b2[o4]);
        ${ACC2}
        for (var ky = 0u; ky < 3u; ky++) {
            for (var i = 0u; i < C4; i++) {
                ${CONV2}
            }
        }
        let acc = array<vec4<f32>, T2>(${ACCS2});
        let y = py + i32(qy);
        for (var t = 0u; t < T2; t++) {
            let qx = c0 + t;
            let xx = px + i32(qx);
            if (qx < P && y < H && xx < W) {
                let mask = f32(cells[(u32(y) / CELL) * NCX + u32(xx) / CELL]);
                let residual = xin[((qy + 2u) * XS + qx + 2u) * C4 + o4];
                out[at(u32(y), u32(xx), o4)] = D4(residual + acc[t] * mask);
            }
        }
    }
}
