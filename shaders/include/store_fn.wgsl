// The shared store of kernels that write several output vec4s per invocation (the conv family): bounds check
// against the output's SO slices x OH x OW, then the epilogue, then the write to `dst`.
fn store(v: vec4<f32>, ob: u32, oy: u32, ox: u32, os: u32) {
  if (os >= ${SO}u || ox >= ${OW}u || oy >= ${OH}u) { return; }
  let oi = ((ob * ${SO}u + os) * ${OH}u + oy) * ${OW}u + ox;
#include "store_value.wgsl"
