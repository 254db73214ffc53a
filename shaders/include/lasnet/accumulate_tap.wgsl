// One 3x3 tap of the LASNet convs (lasnet_conv_gather / lasnet_conv_scatter): input channel slice i at tap
// `tap` against output slice o4's four weight rows, accumulated into acc[t] for the TX pixels in v.
{
    let k = o4 * 36u * C4 + tap + i;
    let w0 = weights[k];
    let w1 = weights[k + 9u * C4];
    let w2 = weights[k + 18u * C4];
    let w3 = weights[k + 27u * C4];
    for (var t = 0u; t < TX; t++) {
        acc[t] += vec4<f32>(dot(w0, v[t]), dot(w1, v[t]), dot(w2, v[t]), dot(w3, v[t]));
    }
}
