// `row`, the query row of a tile (one row per tile, ROWS rows), and `has_row`, whether the tile has one to store.
let row = min(tile, ${ROWS_LAST}u);
let has_row = tile < ${ROWS}u;
