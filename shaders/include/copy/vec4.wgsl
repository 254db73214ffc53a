// A body of copy.wgsl moving whole vec4s: `c` is the slice's first channel, SELECT sets `value` from INIT.
let c = os * 4u;
var value = ${INIT};
${SELECT}
