// LASNet sparse execution, step 2 (lowering/kernels/lasnet.py): the patches step 1 listed become the x count of the
// indirect dispatch of step 3 (y = z = 1), and the counter is cleared for the next invoke. One invocation: a buffer
// cannot be step 1's atomic counter and step 3's indirect arguments at once, and step 3 cannot clear what it is
// dispatched by.
${BINDINGS}

const NP: u32 = ${NP}u;

@compute @workgroup_size(1)
fn main() {
    args[0] = min(atomicLoad(&count[0]), NP);
    args[1] = 1u;
    args[2] = 1u;
    atomicStore(&count[0], 0u);
}
