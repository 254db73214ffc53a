// The head of main in kernels that take a Decomposition (codegen.py, split reductions): workgroups of `group`
// output tiles x `split` invocations; LANE_ARGS adds the subgroup builtins it needs, LANE defines k (the
// invocation's share of the reduction), slot (its tile in the workgroup) and tile (the global tile index).
@compute @workgroup_size(${WG_X}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32${LANE_ARGS}) {
  ${LANE}
