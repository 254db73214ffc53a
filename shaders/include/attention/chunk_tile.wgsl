// Flash-decoding, one row per tile: tile t is chunk c (of CHUNKS) of row `row` (of TILES tiles in all).
let t = min(tile, ${TILES_LAST}u);
let row = t / ${CHUNKS}u;
let c = t % ${CHUNKS}u;
let has_row = tile < ${TILES}u;
