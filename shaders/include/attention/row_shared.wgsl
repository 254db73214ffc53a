// `row` and `has_row` where a workgroup's rows share K/V: tiles come in groups of PADDED per UNIT rows (a KV head's
// query rows, padded to whole workgroups); the padding tiles have no row.
let r = tile % ${PADDED}u;
let row = min(tile / ${PADDED}u * ${UNIT}u + min(r, ${UNIT_LAST}u), ${ROWS_LAST}u);
let has_row = r < ${UNIT}u && tile / ${PADDED}u * ${UNIT}u < ${ROWS}u;
