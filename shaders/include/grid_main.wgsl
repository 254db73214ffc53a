// The head of main in shaders with one invocation per grid point: the workgroup size, the global invocation id
// `gid`, and invocations outside the GRID_X x GRID_Y x GRID_Z grid returning.
@compute @workgroup_size(${WG_X}, ${WG_Y}, ${WG_Z})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= ${GRID_X} || gid.y >= ${GRID_Y} || gid.z >= ${GRID_Z}) { return; }
