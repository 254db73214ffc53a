// Invocation 0 of a row merges the softmax states of the row's SPLIT invocations (workgroup memory, partials.wgsl).
part_ml[pos] = vec2<f32>(mx, total);
for (var s = 0u; s < ${VS}u; s++) { part_acc[pos * ${VS}u + s] = acc[s]; }
workgroupBarrier();
if (k == 0u) {
  for (var j = 1u; j < ${SPLIT}u; j++) {
    let o = pos + j;
    let other = part_ml[o];
    let top = max(mx, other.x);
    let a = exp(mx - top);
    let b = exp(other.x - top);
    total = total * a + other.y * b;
    for (var s = 0u; s < ${VS}u; s++) { acc[s] = acc[s] * a + part_acc[o * ${VS}u + s] * b; }
    mx = top;
  }
}
