// attention_lanes.wgsl's scores where a key group of LANES lanes spans several subgroups (subgroups smaller than
// it): each subgroup's first lane stores its partial sums, and every lane adds those of its group's subgroups. The
// condition is uniform (the subgroup size); the barriers stay outside it.
if (${LANES}u > sg_size && sg_lane == 0u) {
  part_dots[sg_id] = dots;
}
workgroupBarrier();
if (${LANES}u > sg_size) {
  let first = pos / ${LANES}u * (${LANES}u / sg_size);
  dots = part_dots[first];
  for (var j = 1u; j < ${LANES}u / sg_size; j++) {
    dots += part_dots[first + j];
  }
}
workgroupBarrier();
