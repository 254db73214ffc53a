// The window loops of a general conv (CONV_2D, DEPTHWISE_CONV_2D): input row iy of tap row ky (rows in the
// padding skipped), then per tap column kx the first input column ix0 of the tile's XT output columns (COLS: each
// column's index and whether it lies inside the input). The includer goes on inside the kx loop and closes both.
for (var ky = 0u; ky < ${KH}u; ky++) {
  let iy = i32(oy * ${SH}u + ky * ${DH}u) - ${PT};
  if (iy < 0 || iy >= ${IH}) { continue; }
  for (var kx = 0u; kx < ${KW}u; kx++) {
    let ix0 = i32(ox0 * ${SW}u + kx * ${DW}u) - ${PL};
    ${COLS}
