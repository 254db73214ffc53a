// int8 SOFTMAX: exp of the integer distances below the row's maximum (0..255, as f32), read from the `exp_table`
// binding (LiteRT's table, kernels/softmax.py exp_table).
fn exp_lut(d: vec4<f32>) -> vec4<f32> {
  let i = vec4<u32>(clamp(d, vec4<f32>(0.0), vec4<f32>(255.0)));
  return vec4<f32>(exp_table[i.x >> 2u][i.x & 3u], exp_table[i.y >> 2u][i.y & 3u], exp_table[i.z >> 2u][i.z & 3u],
                   exp_table[i.w >> 2u][i.w & 3u]);
}
