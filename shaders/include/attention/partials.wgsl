// The workgroup memory through which a row's split invocations merge their softmax states (combine.wgsl).
var<workgroup> part_acc: array<vec4<f32>, ${PART_VEC4S}>;
var<workgroup> part_ml: array<vec2<f32>, ${INVOCATIONS}>;
