// LANE of a split reduction (codegen.lane_placeholders): POS finds the invocation's place `pos` in the workgroup
// (its local index, or from its subgroup), k = its share of the tile's reduction (of SPLIT), slot = its tile in
// the workgroup, tile = the global tile index (GROUP tiles a workgroup, DISPATCH_X workgroups a dispatch row).
${POS}
let k = pos % ${SPLIT}u;
let slot = pos / ${SPLIT}u;
let tile = (wid.x + wid.y * ${DISPATCH_X}u) * ${GROUP}u + slot;
