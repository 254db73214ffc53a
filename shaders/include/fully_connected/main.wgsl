// The head of main in both FULLY_CONNECTED shaders: the tile's first row r0 (of RT rows, RTILES row tiles) and
// first output slice os0 (of ST slices, SG slice tiles); NORM: the rows' normalizers when a norm prologue is fused.
#include "tile_main.wgsl"
  let r0 = tile % ${RTILES}u * ${RT}u;
  let os0 = tile / ${RTILES}u % ${SG}u * ${ST}u;
  ${NORM}
