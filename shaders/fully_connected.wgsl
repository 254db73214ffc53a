// FULLY_CONNECTED: rows of P input pixels x SI slices against mat4x4 weight blocks [out_slice][in_slice][pixel]
// (K = SI * P blocks per output slice). A tile is RT rows x ST output slices (one weight load feeds RT rows, one
// input load ST slices); its SPLIT invocations take every SPLIT-th block from block k on and add up their sums.
// NORM (rows of one pixel): the rows' RMS normalizers, a pass of its own over each row; TAPS then read the rows
// normalized.
${BINDINGS}

#include "fully_connected/store.wgsl"

${LANE_MEMORY}

#include "fully_connected/main.wgsl"
  ${ACC_INIT}
  for (var q = k; q < ${K}u; q += ${SPLIT}u) {
    let sl = q / ${P}u;
    let px = q % ${P}u;
    ${TAPS}
  }
#include "split_store.wgsl"
