// Flash-decoding where a workgroup's rows (one KV head's) share K/V: tiles chunk-major (CHUNK_TILES a chunk), so
// the chunk c follows from the workgroup alone (GROUP tiles a workgroup, DISPATCH_X workgroups a dispatch row).
let chunk_tiles = ${CHUNK_TILES}u;
let c = min((wid.x + wid.y * ${DISPATCH_X}u) * ${GROUP}u / chunk_tiles, ${CHUNKS_LAST}u);
let r = tile % ${PADDED}u;
let row = min(tile % chunk_tiles / ${PADDED}u * ${UNIT}u + min(r, ${UNIT_LAST}u), ${ROWS_LAST}u);
let has_row = r < ${UNIT}u && tile < ${TILES}u;
