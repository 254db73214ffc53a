// LANE of an unsplit decomposition: one invocation a tile (k = 0), slot = its tile in the workgroup, tile = the
// global tile index (GROUP tiles a workgroup, DISPATCH_X workgroups a dispatch row).
let k = 0u;
let slot = li;
let tile = (wid.x + wid.y * ${DISPATCH_X}u) * ${GROUP}u + slot;
