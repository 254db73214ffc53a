"""ATTENTION: an internal op (passes/fuse_attention.py) for BATCH_MATMUL(Q, K^T) -> [MUL scale] -> [ADD mask] ->
SOFTMAX -> BATCH_MATMUL(·, V) in one dispatch.

Inputs q, k, v[, mask]; option `k_adj`: K is stored [..., N, D] (the first matmul's adj_y) rather than [..., D, N];
`scale`: the MUL's constant times SOFTMAX's beta (`mask_scale`: beta, for the mask); `kv_group`: query heads per K/V
head (grouped-query attention: query head h reads K/V head h // kv_group, so K and V are never broadcast); layout
views of the operands and the output as the matmuls had them (kernels/layout_view.py, passes/fold_matmul_layout.py),
so the head split and merge cost nothing either. A row is one query: an online softmax over the keys (running
maximum and sum) accumulating the weighted values, so the [M, N] score matrix is never written and no row is too
long. Query and value rows of up to MAX_DEPTH channels live in registers as vec4 arrays.

Decompositions (Variants, chosen per target by latency/policy.py), all within WebGPU's default limits:
  * rows: one row per tile, its keys split over `split` invocations of a workgroup that merge their softmax states
    through workgroup memory (the workgroup shrinks so they fit: split 1 needs none, so there is always one).
  * shared K/V (prefill, tile[0] > 1): a workgroup of `group` rows reading the same K/V (one head, or one KV head's
    query heads) loads blocks of keys into workgroup memory once for all of them.
  * flash-decoding (at most DECODE_ROWS queries per head over many keys, tile[1] = chunks): the keys are cut into
    chunks, each reduced by its own workgroup to a partial state in scratch; the last workgroup of a row to finish
    merges them, so a big GPU fills at batch 1 in one dispatch. Also for more queries where one workgroup a row
    would leave each invocation too much work (`long_rows`: a short prompt over a long cache).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import (
    ATTENTION,
    K_ADJ,
    KV_GROUP,
    MASK_FROM_POSITION,
    MASK_SCALE,
    ONE_DISPATCH,
    OUT_VIEW,
    SCALE,
    SOURCE_OPS,
)
from ...model.ops import ATTENTION_VIEWS as VIEWS
from .. import codegen
from ..codegen import literal
from ..layout import slices, to_bhwc
from . import layout_view, tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering, Touched, Variants
from .common import float_tensors
from .fully_connected import READER_PARAMS, batch2, operand_reader, out_index, output_locator
from .reduce import FLT_MAX

MAX_DEPTH = 256  # channels of a query / value row held in registers (as arrays of vec4)
DECODE_ROWS = 4  # at most this many queries per head: flash-decoding (keys split across workgroups)
MIN_CHUNK = 8  # keys per flash-decoding chunk at least
MAX_CHUNKS = 64
# a dispatch of at least BIG_MACS multiply-adds whose rows, each in one workgroup, leave an invocation more than
# KEYS_MACS of them (a short prompt over a long cache: few rows, each over many keys) also gets flash-decoding's key
# chunks, at most PREFILL_TILES (row, chunk) tiles (their scratch states); the parallelism rule of
# tests/models/test_work_decomposition.py
BIG_MACS = 1_000_000
KEYS_MACS = 16_384
PREFILL_TILES = 1024


def logical(op: Op, graph: Graph, i: int) -> tuple[int, ...]:
    steps = op.opt(VIEWS[i])
    return tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[op.inputs[i]].shape)


def logical_out(op: Op, graph: Graph) -> tuple[int, ...]:
    steps = op.opt(OUT_VIEW)
    return tuple(steps[0].in_shape) if steps else tuple(graph.tensors[op.outputs[0]].shape)


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


def flash_decoding(m: int, n: int) -> bool:
    """Whether m queries per head over n keys are split across workgroups (flash-decoding) unless ONE_DISPATCH."""
    return m <= DECODE_ROWS and n >= 2 * MIN_CHUNK


def long_rows(rows: int, n: int, d: int, dv: int) -> bool:
    """Whether `rows` rows over n keys (more than DECODE_ROWS queries a head) need key chunks too: the largest
    split of a row within its workgroup (_row_candidates) leaves an invocation more than KEYS_MACS multiply-adds
    of a big dispatch (head dim 256: more than 32 keys)."""
    most_split = max(dec.split for dec in _row_candidates(rows, n, slices(dv)))
    return rows * n * (d + dv) >= BIG_MACS and -(-n // most_split) * (d + dv) > KEYS_MACS and n >= 2 * MIN_CHUNK


def _power_of_2(n: int) -> int:
    """The largest power of 2 at most n (1 below 1)."""
    return 1 << max(0, n.bit_length() - 1)


def _mask_rows_check(op: Op, graph: Graph) -> str | None:
    """Why inputs 3 and 4 are not a MASK_FROM_POSITION table [R + 1, N] and position (None: they are)."""
    shape, wrap, window = op.opt(MASK_FROM_POSITION)
    if window is not None and (len(window) != 5 or not all(isinstance(v, int) for v in window[:2])
                               or not all(isinstance(v, float) for v in window[2:4])):
        return "a mask window is (below, above, inside, outside, row first)"
    table, position = graph.tensors[op.inputs[3]], graph.tensors[op.inputs[4]]
    if not isinstance(wrap, bool) or not shape or any(d != 1 for d in shape[:-1]):
        return "a mask from the position is one row of the scores' width"
    if table.data is None or table.dtype != np.float32 or len(table.shape) != 2 or table.shape[0] < 2 \
            or table.shape[1] != shape[-1]:
        return f"mask rows {table.shape} are not [rows + 1, {shape[-1]}] float32 constants"
    if position.data is not None or position.dtype != np.int32 or position.size != 1:
        return "the mask's position must be a run-time int32 of one element"
    return None


def _mask_rows_reader(op: Op, graph: Graph) -> tuple[str, list[Binding]]:
    """`am_at(i0, i1, row, sl)` of a MASK_FROM_POSITION mask: slice sl of table row p (the position, plus R where
    negative when `wrap`), or of row R (the fill) where p is outside [0, R): GATHER_ND's row, SELECT_V2's fill; then
    its minimum with the window's value where there is a window. The window's values follow the rows in the table's
    binding (they may be infinite, which WGSL cannot spell)."""
    _shape, wrap, window = op.opt(MASK_FROM_POSITION)
    table = np.asarray(graph.tensors[op.inputs[3]].data, np.float32)
    rows, width = table.shape[0] - 1, table.shape[1]
    s = slices(width)
    # the rows, then the window's values (may be infinite), then each row's key end (_mask_ends) as floats
    ends = _mask_ends(op, graph, width)
    end_rows = -(-(rows + 1) // (s * 4))
    padded = np.zeros((rows + 2 + end_rows, s * 4), np.float32)
    padded[:rows + 1, :width] = table
    padded[rows + 2:].reshape(-1)[:rows + 1] = ends
    wrapped = f"select(p, p + {rows}i, p < 0i)" if wrap else "p"
    windowed = ""
    if window is not None:  # the minimum with the window, as the MINIMUM kernel takes it (operands in its order)
        below, above, inside, outside, row_first = window
        padded[rows + 1, :2] = inside, outside
        value = f"select(w.y, w.x, j > p - {below}i && j < p + {above}i)"
        pair = f"v[l], {value}" if row_first else f"{value}, v[l]"
        windowed = (f"  let w = am_rows[{(rows + 1) * s}u];\n"
                    f"  for (var l = 0u; l < 4u; l++) {{ let j = i32(sl * 4u + l); v[l] = min({pair}); }}\n")
    fn = (f"fn am_at(i0: u32, i1: u32, row: u32, sl: u32) -> vec4<f32> {{\n"
          f"  let p = i32(f32(am_pos[0]));\n  let q = {wrapped};\n"
          f"  let r = select({rows}u, u32(q), q >= 0i && q < {rows}i);\n"
          f"  var v = am_rows[r * {s}u + sl];\n{windowed}  return v;\n}}\n"
          f"fn am_key_end() -> u32 {{\n  let p = i32(f32(am_pos[0]));\n  let q = {wrapped};\n"
          f"  let r = select({rows}u, u32(q), q >= 0i && q < {rows}i);\n"
          f"  return u32(am_rows[{(rows + 2) * s}u + r / 4u][r % 4u]);\n}}\n")
    bindings = [Binding("am_rows", data=padded.reshape(-1, 4), element="vec4<f32>"),
                Binding("am_pos", tensor=op.inputs[4], element="S1")]
    return fn, bindings


MASKED = -1.0e30  # a mask value at or below this (times mask_scale) leaves a key's weight exactly 0 in f32


def _mask_ends(op: Op, graph: Graph, n: int) -> np.ndarray:
    """Per row of a MASK_FROM_POSITION table (the fill row last), how many keys from the first the row must read:
    the keys after the last one it leaves unmasked (values at or below MASKED, whose exp underflows to 0 beside any
    unmasked score) add nothing to the softmax. N where the row masks every key or holds a NaN, so the result is
    what reading them all gives."""
    table = np.asarray(graph.tensors[op.inputs[3]].data, np.float32) * float(op.opt(MASK_SCALE))
    ends = np.full(table.shape[0], n, np.int64)
    for r, values in enumerate(table):
        open_keys = np.flatnonzero(~(values <= MASKED))
        if open_keys.size and not np.isnan(values).any():
            ends[r] = min(n, int(open_keys[-1]) + 1)
    return ends


def _key_end(op: Op, graph: Graph, n: int) -> tuple[Code, bool]:
    """`key_end()`: how many keys from the first a row reads (the position's row end of a MASK_FROM_POSITION
    mask: its `am_key_end` (_mask_rows_reader), else N), and whether it depends on the position."""
    if op.opt(MASK_FROM_POSITION):
        return Code("fn key_end() -> u32 {\n  return am_key_end();\n}\n"), True
    return Code(f"fn key_end() -> u32 {{\n  return {n}u;\n}}\n"), False


class AttentionKernel:
    ops = (ATTENTION,)
    internal_ops = (ATTENTION,)  # made by a pass, never read from a model

    def supports(self, op: Op, graph: Graph) -> str | None:
        from_position = op.opt(MASK_FROM_POSITION)
        if len(op.inputs) not in ((5,) if from_position else (3, 4)) or len(op.outputs) != 1:
            return f"{ATTENTION} expects q, k, v[, mask | mask rows, position] and 1 output"
        if from_position:
            reason = _mask_rows_check(op, graph)
            if reason:
                return reason
        reason = float_tensors(op, graph, inputs=[0, 1, 2, 3])
        if reason:
            return reason
        for key in (*VIEWS, OUT_VIEW):
            if op.opt(key) and layout_view.check(op.opt(key)):
                return layout_view.check(op.opt(key))
        q, k, v, out = (*(logical(op, graph, i) for i in range(3)), logical_out(op, graph))
        if any(not 2 <= len(s) <= 4 for s in (q, k, v, out)):
            return "operands and output must have rank 2..4"
        if graph.tensors[op.inputs[0]].data is not None:
            return "constant queries"
        m, d = q[-2:]
        n, dk = k[-2:] if op.opt(K_ADJ) else k[-2:][::-1]
        nv, dv = v[-2:]
        if dk != d or nv != n:
            return f"shapes do not chain: q {q}, k {k}, v {v}"
        group = op.opt(KV_GROUP) or 1
        if not isinstance(group, int) or group < 1:
            return f"{KV_GROUP} must be a positive integer"
        kb, vb = k[:-2], v[:-2]
        if group > 1:  # K and V have one head per `group` query heads: the head axis is the last batch axis
            if len(q) < 3 or len(k) != len(q) or len(v) != len(q) or q[-3] != k[-3] * group or k[-3] != v[-3]:
                return f"{KV_GROUP} {group}: q {q} does not have {group} heads per head of k {k} and v {v}"
            kb, vb = (*k[:-3], q[-3]), (*v[:-3], q[-3])
        try:
            batch = np.broadcast_shapes(q[:-2], kb, vb)
        except ValueError:
            return "batch dims do not broadcast"
        if tuple(out) != (*batch, m, dv):
            return f"output shape {out} is not {(*batch, m, dv)}"
        if d > MAX_DEPTH or dv > MAX_DEPTH:
            return f"rows of {max(d, dv)} channels (at most {MAX_DEPTH})"
        scale = op.opt(SCALE)
        if not isinstance(scale, float) or not np.isfinite(scale):
            return "scale must be a finite float"
        if len(op.inputs) >= 4:
            mask = tuple(from_position[0]) if from_position else tuple(graph.tensors[op.inputs[3]].shape)
            mask_scale = op.opt(MASK_SCALE)
            if not isinstance(mask_scale, float) or not np.isfinite(mask_scale):
                return "mask_scale must be a finite float"
            scores = (*batch, m, n)
            try:  # leading 1s of the mask beyond the scores' rank are no batch
                if not 2 <= len(mask) <= 4 or _strip(np.broadcast_shapes(mask, scores)) != _strip(scores):
                    return f"mask {mask} does not broadcast to the scores {scores}"
            except ValueError:
                return f"mask {mask} does not broadcast to the scores {scores}"
        try:
            if op.opt(OUT_VIEW) and out_index(op.opt(OUT_VIEW)) is None:
                return "the output view does not keep 4 adjacent channels together"
            for i, key in enumerate(VIEWS):
                if op.opt(key):
                    layout_view.reader(op.opt(key), "v", READER_PARAMS[len(logical(op, graph, i))])
        except ValueError as e:
            return f"layout view: {e}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        out = op.outputs[0]
        oshape = logical_out(op, graph)
        group = kv_group(op)
        fq, bq, qshape, _ = operand_reader(graph, op.inputs[0], False, "xq", op.opt("view_q"))
        # the K reader: a constant K stored [D, N] is transposed at build, so it reads [N, D] (adj) afterwards
        view_k, k_adj = key_rows(op.opt("view_k"), bool(op.opt(K_ADJ)))
        fk, bk, kshape, k_not_adj = operand_reader(graph, op.inputs[1], not k_adj, "xk", view_k)
        fv, bv, vshape, _ = operand_reader(graph, op.inputs[2], False, "yv", op.opt("view_v"))
        m, d = qshape[-2:]
        n = kshape[-1] if k_not_adj else kshape[-2]
        dv = vshape[-1]
        ds, vs = slices(d), slices(dv)
        b0, b1 = batch2(oshape)
        if k_not_adj:  # K stored [D, N]: lane j of slice s is K[4s + j, n]
            lanes = ", ".join(f"xk_at(i0, i1, min(4u * s + {j}u, {d - 1}u), n / 4u)[n % 4u]" for j in range(4))
            key_body = f"return vec4<f32>({lanes});"
        else:
            key_body = "return xk_at(i0, i1, n, s);"
        # query head i1 reads KV head i1 / group: grouped-query attention without broadcasting K and V
        kv = "i1" if group == 1 else f"i1 / {group}u"
        readers = fq + fk + fv
        mask_bindings = []
        mask_value = "0.0"
        if len(op.inputs) >= 4:
            if op.opt(MASK_FROM_POSITION):
                mshape = tuple(op.opt(MASK_FROM_POSITION)[0])
                fm, mask_bindings = _mask_rows_reader(op, graph)
            else:
                mshape = tuple(graph.tensors[op.inputs[3]].shape)
                fm, bm, _, _ = operand_reader(graph, op.inputs[3], False, "am", None)
                mask_bindings = [bm]
            row = "m" if len(mshape) >= 2 and mshape[-2] > 1 else "0u"
            sl, ln = ("n / 4u", "n % 4u") if mshape[-1] > 1 else ("0u", "0u")
            mask_value = f"am_at(i0, i1, {row}, {sl})[{ln}] * {literal(float(op.opt(MASK_SCALE)))}"
            readers += fm
        oc_ = to_bhwc(tuple(graph.tensors[out].shape))[3]
        locate = output_locator(graph, out, oshape, op.opt(OUT_VIEW), "\n  ")
        rows = b0 * b1 * m
        fixed = {
            "READERS": Code(readers.removesuffix("\n")), "KEY_BODY": Code(key_body), "MASK_VALUE": Code(mask_value),
            "M": m, "B1": b1, "N": n, "DS": ds, "VS": vs,
            "KV": Code(kv), "SCALE": Code(literal(float(op.opt(SCALE)))), "LOWEST": Code(literal(-FLT_MAX)),
        }
        views = "+".join(k.split("_")[1] for k in (*VIEWS, OUT_VIEW) if op.opt(k))
        source = f"({'+'.join(op.opt(SOURCE_OPS))})" if op.opt(SOURCE_OPS) else ""
        gqa = f" kv_group {group}" if group > 1 else ""
        label = f"{ATTENTION}{source} {qshape}x{kshape}x{vshape}{gqa}{f' (views {views})' if views else ''}"
        inputs = [bq, bk, bv, *mask_bindings]
        numbers = {"M": m, "N": n, "D": d, "DV": dv, "B": b0 * b1, "G": group}
        step = (ds + vs) * tiling.LOAD + 4 * (ds + vs) + 40  # loads, dot and multiply-adds, two exp
        macs = rows * n * (d + dv)
        unit = group * m  # rows that read the same K and V: a KV head's query heads, or all heads of K/V broadcast
        if group == 1 and b1 > 1 and batch2(kshape)[1] == 1 and batch2(vshape)[1] == 1:
            unit = b1 * m
        units = rows // unit
        if (flash_decoding(m, n) or long_rows(rows, n, d, dv)) and not op.opt(ONE_DISPATCH):
            most = _max_chunks(n) if flash_decoding(m, n) else max(2, min(_max_chunks(n), _power_of_2(
                PREFILL_TILES // rows)))
            return self._flash_decoding(fixed, inputs, locate, oc_, label, (rows, unit, n, ds, vs), step, numbers,
                                        macs, [readers, mask_value], out, _key_end(op, graph, n),
                                        len(op.inputs) >= 4, most)
        dst = Binding("dst", tensor=out, writable=True)

        def make(dec: Decomposition) -> KernelSpec:
            shared_kv = dec.tile[0] > 1
            tiles = units * _padded(unit, dec.group) if shared_kv else rows
            params, dispatch = tiling.split_params(dec, tiles, [])
            invocations = dec.invocations_per_workgroup
            block = _key_block(ds, vs, dec.group)
            params.update({**fixed, "LOCATE": Code(locate),
                           "ROW": _row_code(shared_kv, rows, unit, _padded(unit, dec.group)),
                           "KEYS": _shared_keys("0u", f"{n}u", ds, vs, block, invocations) if shared_kv
                                   else _keys("0u", f"{n}u", dec.split, ds, vs),
                           "KV_MEMORY": Code(f"var<workgroup> kv_tile: array<vec4<f32>, {block * (ds + vs)}>;"
                                             if shared_kv else ""),
                           "PARTIALS": _partials(invocations, vs) if dec.split > 1 else Code(""),
                           "COMBINE": _combine(dec.split, vs) if dec.split > 1 else Code("")})
            fresh = [dataclasses.replace(b) for b in (*inputs, dst)]  # fusion edits a spec's bindings in place
            return KernelSpec("attention", params, fresh, grid=(tiles * dec.split, 1, 1),
                              workgroup=(invocations, 1, 1), dispatch=dispatch, out_channels=oc_,
                              label=f"{label} [{describe(dec)}]")

        def work(dec: Decomposition) -> float:
            if dec.tile[0] > 1:  # a workgroup loads each key once for all its rows, from workgroup memory after
                return n * (step - (ds + vs) * tiling.LOAD * (1 - 1 / dec.group) + 2) + tiling.OVERHEAD
            return (math.ceil(n / dec.split) * step + tiling.reduction_cost(dec, vs + 1) * 2 + tiling.OVERHEAD)

        candidates = _row_candidates(rows, n, vs) + _shared_candidates(unit, ds, vs)

        def count(dec: Decomposition) -> int:
            return units * _padded(unit, dec.group) if dec.tile[0] > 1 else rows

        variants = Variants(problem=tiling.problem_key("attention", numbers, [readers, mask_value]),
                            candidates=candidates, invocations=lambda dec: tiling.launched(count(dec), dec),
                            active=lambda dec: count(dec) * dec.split, work=work, make=make, macs=macs)
        return [variants]

    def _flash_decoding(self, fixed: dict, inputs: list[Binding], locate: str, oc_: int, label: str,
                        sizes: tuple[int, int, int, int, int], step: float, numbers: dict, macs: int,
                        code: list[str], out: int, key_end: tuple[Code, bool] = (Code(""), False),
                        masked: bool = False, most: int = MAX_CHUNKS) -> Lowering:
        """Few queries over many keys: the keys are cut into `chunks` ranges, each reduced by its own workgroup
        (and `split` invocations within it, or shared by the rows of a KV head) to a partial softmax state (max,
        sum, weighted values) in scratch; the last tile of a row to finish (an atomic count per row, reset by that
        tile) merges the row's states and writes the output, so flash-decoding is one dispatch (a second merge
        dispatch cost 3.5 us a layer predicted on h100, and its host recording)."""
        rows, unit, n, ds, vs = sizes
        units = rows // unit
        most = _max_chunks(n)
        entries = 1 + rows * most * (vs + 1)  # one unused, then per row and chunk: (max, sum) and VS values
        key = f"attention-partials-{out}"

        def scratch() -> Binding:
            return Binding("partials", scratch_bytes=entries * 16, scratch_key=key, writable=True,
                           element="vec4<f32>")

        def arrivals() -> Binding:  # per row: the tiles done (zero between dispatches: the last one resets it)
            return Binding("arrivals", scratch_bytes=rows * 4, scratch_key=f"attention-arrivals-{out}",
                           writable=True, element="atomic<u32>")

        def count(dec: Decomposition) -> int:  # subgroup forms: (lanes, chunks) tiles, one a row and chunk
            return dec.tile[1] * (units * _padded(unit, dec.group) if dec.tile[0] > 1 and not dec.subgroup else rows)

        def make(dec: Decomposition) -> KernelSpec:
            if dec.subgroup:
                return _lanes_spec(dec, fixed, (rows, n, ds, vs), key_end, locate, oc_,
                                   [*inputs, scratch(), arrivals(), Binding("dst", tensor=out, writable=True)],
                                   f"{label} flash-decoding [{describe(dec, lanes=True)}]")
            chunks, shared_kv = dec.tile[1], dec.tile[0] > 1
            tiles = count(dec)
            params, dispatch = tiling.split_params(dec, tiles, [])
            invocations = dec.invocations_per_workgroup
            block = _key_block(ds, vs, dec.group, reserved=-(-dec.group // 4))  # and last_tile's flags
            if shared_kv:  # chunk-major, so a workgroup's rows (one KV head's) share their chunk: from wid alone
                padded = _padded(unit, dec.group)
                row = codegen.fill("attention/chunk_shared.wgsl", {
                    "CHUNK_TILES": units * padded, "DISPATCH_X": dispatch[0], "GROUP": dec.group,
                    "CHUNKS_LAST": chunks - 1, "PADDED": padded, "UNIT": unit, "UNIT_LAST": unit - 1,
                    "ROWS_LAST": rows - 1, "TILES": tiles}, "  ")
            else:
                row = codegen.fill("attention/chunk_tile.wgsl", {"TILES_LAST": tiles - 1, "CHUNKS": chunks,
                                                                 "TILES": tiles}, "  ")
            chunk = -(-n // chunks)
            start, end = f"c * {chunk}u", f"min({n}u, (c + 1u) * {chunk}u)"
            params.update({**fixed, "CHUNKS": chunks, "CHUNKS_LAST": chunks - 1, "STATE": vs + 1, "ROW": row,
                           "LOCATE": Code(locate), "GROUP": dec.group, "MERGE_STEP": dec.split,
                           "KEYS": _shared_keys(start, end, ds, vs, block, invocations) if shared_kv
                                   else _keys(start, end, dec.split, ds, vs),
                           "KV_MEMORY": Code(f"var<workgroup> kv_tile: array<vec4<f32>, {block * (ds + vs)}>;"
                                             if shared_kv else ""),
                           "PARTIALS": _partials(invocations, vs) if dec.split > 1 else Code(""),
                           "COMBINE": _combine(dec.split, vs) if dec.split > 1 else Code("")})
            fresh = [*(dataclasses.replace(b) for b in inputs), scratch(), arrivals(),
                     Binding("dst", tensor=out, writable=True)]
            return KernelSpec("attention_partials", params, fresh, grid=(tiles * dec.split, 1, 1),
                              workgroup=(invocations, 1, 1), dispatch=dispatch, out_channels=oc_,
                              label=f"{label} flash-decoding [{describe(dec)}]")

        def work(dec: Decomposition, position: int | None = None) -> float:
            if dec.subgroup:
                return _lanes_work(dec, n if position is None else min(n, position + 1), ds, vs, masked)
            keys = math.ceil(n / dec.tile[1])
            # the merge a row's last tile adds: its chunks' maxima, then per slice (split over the tile's
            # invocations) each chunk's state and slice, an exp and a multiply-add, and the store
            merge = dec.tile[1] * tiling.LOAD + math.ceil(vs / dec.split) * (
                dec.tile[1] * (2 * tiling.LOAD + 6) + tiling.LOAD) + 4
            if dec.tile[0] > 1:
                per_key = step - (ds + vs) * tiling.LOAD * (1 - 1 / dec.group) + 2
                return keys * per_key + tiling.OVERHEAD + (vs + 1) * tiling.LOAD + merge
            return math.ceil(keys / dec.split) * step + tiling.reduction_cost(dec, vs + 1) * 2 + (
                tiling.OVERHEAD + (vs + 1) * tiling.LOAD) + merge

        # with subgroups, key groups of lanes (the key-split row candidates' subgroup forms are replaced by them)
        candidates = [d for d in _row_candidates(rows, n, vs, most) if not d.subgroup] + _lanes_candidates(
            n, ds, vs, most) + _shared_candidates(unit, ds, vs, most)
        # the key end read up to the position (KEY_END): the work of a decode step at a position (latency model)
        by_position = key_end[1]
        variants = Variants(problem=tiling.problem_key("attention_partials", numbers, code), candidates=candidates,
                            invocations=lambda dec: tiling.launched(count(dec), dec),
                            active=lambda dec: count(dec) * dec.split, work=work, make=make, macs=macs,
                            work_at=work if by_position else None,
                            barriers=lambda dec: _lanes_barriers(dec, n) if dec.subgroup else None,
                            shuffles=lambda dec: _lanes_shuffles(dec, n, vs) if dec.subgroup else None,
                            template=lambda dec: "attention_lanes" if dec.subgroup else "attention_partials")
        return [variants]


def key_rows(view: tuple | None, k_adj: bool) -> tuple[tuple | None, bool]:
    """K read as [..., N, D] rows where its view starts by transposing such rows to [..., D, N] (then only adds or
    drops leading 1s): one vec4 load per 4 channels of a key instead of one per channel."""
    if k_adj or not view or view[0].kind != "TRANSPOSE":
        return view, k_adj
    rank = len(view[0].in_shape)
    if rank < 2 or tuple(view[0].perm) != (*range(rank - 2), rank - 1, rank - 2):
        return view, k_adj
    rest = view[1:]
    if not all(step.kind == "RESHAPE" and _strip(step.in_shape) == _strip(step.out_shape) for step in rest):
        return view, k_adj
    def swap(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape[:-2], shape[-1], shape[-2])

    steps = tuple(dataclasses.replace(step, in_shape=swap(tuple(step.in_shape)), out_shape=swap(tuple(step.out_shape)))
                  for step in rest)
    return (steps or None), True


def kv_group(op: Op) -> int:
    """Query heads per K/V head (grouped-query attention): query head h reads K/V head h // kv_group."""
    value = op.opt(KV_GROUP)
    return int(value) if value else 1


def describe(dec: Decomposition, lanes: bool = False) -> str:
    """A decomposition in ATTENTION's terms (tile[0] > 1: rows sharing K/V blocks; tile[1]: key chunks; `lanes`:
    flash-decoding's subgroup form, key groups of tile[0] lanes)."""
    if lanes and dec.subgroup:
        lanes_ = dec.tile[0]
        return (f"{dec.tile[1]} key chunks, {dec.split // lanes_} key groups of {lanes_} lanes (subgroup), "
                f"workgroup {dec.invocations_per_workgroup}")
    parts = []
    if dec.tile[0] > 1:
        parts.append(f"{dec.group} rows share K/V")
    if dec.tile[1] > 1:
        parts.append(f"{dec.tile[1]} key chunks")
    if dec.split > 1:
        parts.append(f"split {dec.split} ({'subgroup' if dec.subgroup else 'shared memory'})")
    return ", ".join([*parts, f"workgroup {dec.invocations_per_workgroup}"])


def _padded(unit: int, group: int) -> int:
    return -(-unit // group) * group


def _key_block(ds: int, vs: int, rows: int, reserved: int = 0) -> int:
    """Keys a workgroup of `rows` rows loads into workgroup memory at a time (K and V slices of each), leaving
    `reserved` vec4s of it to other uses."""
    block = 1
    while block * 2 * (ds + vs) <= tiling.LANE_MEMORY_VEC4 - reserved and block * 2 <= max(rows, 8):
        block *= 2
    return block


def _max_chunks(n: int) -> int:
    chunks = 1
    while chunks * 2 <= MAX_CHUNKS and chunks * 2 * MIN_CHUNK <= n:
        chunks *= 2
    return chunks


def _row_candidates(rows: int, n: int, vs: int, max_chunks: int = 1) -> list[Decomposition]:
    """One row per tile, its keys split over `split` invocations of a workgroup (states merged through workgroup
    memory, one per invocation: the group shrinks so they fit) and, for flash-decoding, over `chunks`
    workgroups. Always includes split 1 (no workgroup memory at all)."""
    result = []
    chunks = 1
    while chunks <= max_chunks:
        per_chunk = -(-n // chunks)
        split = 1
        while split == 1 or (split <= tiling.MAX_WORKGROUP and split * tiling.MIN_STEPS <= per_chunk):
            group = tiling.default_group(split, rows * chunks)
            while split > 1 and group > 1 and split * group * (vs + 1) > tiling.LANE_MEMORY_VEC4:
                group //= 2
            if split == 1 or split * group * (vs + 1) <= tiling.LANE_MEMORY_VEC4:
                for subgroup in ((False,) if split == 1 else (False, True)):
                    result.append(Decomposition((1, chunks), split, group, subgroup))
            split *= 2
        chunks *= 2
    return result


def _shared_candidates(unit: int, ds: int, vs: int, max_chunks: int = 1) -> list[Decomposition]:
    """Workgroups of `group` rows reading the same K/V (one head's queries, or a KV head's query heads) that load
    blocks of keys into workgroup memory once for all of them; with flash-decoding, over each of `chunks` key
    ranges. Only where at least 2 rows share, and at most half the workgroup is padding."""
    result = []
    chunks = 1
    while chunks <= max_chunks:
        for group in (4, 8, 16, 32, 64):
            if unit < 2 or group > 2 * unit or _key_block(ds, vs, group) * (ds + vs) > tiling.LANE_MEMORY_VEC4:
                continue
            result.append(Decomposition((group, chunks), 1, group, False))
        chunks *= 2
    return result


def _row_code(shared_kv: bool, rows: int, unit: int, padded: int) -> Code:
    """WGSL defining `row` (the query row of this tile) and `has_row` (whether it has one to store)."""
    if not shared_kv:
        return codegen.fill("attention/row_tile.wgsl", {"ROWS_LAST": rows - 1, "ROWS": rows}, "  ")
    return codegen.fill("attention/row_shared.wgsl", {"PADDED": padded, "UNIT": unit, "UNIT_LAST": unit - 1,
                                                      "ROWS_LAST": rows - 1, "ROWS": rows}, "  ")


def _keys(start: str, end: str, split: int, ds: int, vs: int) -> Code:
    """The key loop of a row over keys [start, end) (every split-th key), reading K and V from storage."""
    return codegen.fill("attention/keys.wgsl", {"START": Code(start), "END": Code(end), "SPLIT": split, "DS": ds,
                                                "VS": vs}, "  ")


def _shared_keys(start: str, end: str, ds: int, vs: int, block: int, invocations: int) -> Code:
    """The key loop of a workgroup whose rows read the same K/V, over keys [start, end) (the same for the whole
    workgroup): blocks of `block` keys loaded into kv_tile by all its invocations, then read by each row from
    workgroup memory."""
    return codegen.fill("attention/shared_keys.wgsl", {
        "START": Code(start), "END": Code(end), "BLOCK": block, "BLOCK_VEC4S": block * (ds + vs), "WIDTH": ds + vs,
        "INVOCATIONS": invocations, "DS": ds, "VS": vs}, "  ")


def _partials(invocations: int, vs: int) -> Code:
    return codegen.fill("attention/partials.wgsl", {"PART_VEC4S": invocations * vs, "INVOCATIONS": invocations})


def _combine(split: int, vs: int) -> Code:
    """Invocation 0 of a row merges the softmax states of the row's `split` invocations (workgroup memory)."""
    return codegen.fill("attention/combine.wgsl", {"SPLIT": split, "VS": vs}, "  ")


# -- flash-decoding with subgroups: key groups of lanes sharing a row's channels (shaders/attention_lanes.wgsl) ----
LANES = (4, 8, 16, 32)  # lanes a key group may have (4: within one subgroup on every adapter)
SUBGROUP = 32  # the subgroup size the cost assumes (NVIDIA, Apple, AMD's wave32); the kernel is right at any


def _lanes_memory(invocations: int, lanes: int, vs: int) -> int:
    """vec4s of workgroup memory the merges across subgroups need: at most one state per invocation (subgroups
    of 4), and a key group's partial scores per subgroup where it may span several."""
    states = invocations
    return states * -(-vs // lanes) + -(-states // 2) + (invocations // 4 if lanes > 4 else 0) + 2


def _lanes_candidates(n: int, ds: int, vs: int, max_chunks: int) -> list[Decomposition]:
    """(lanes, chunks) tiles of `split` invocations = split / lanes key groups, one tile a workgroup, where each key
    group has at least one block of 4 keys and the merges fit the workgroup memory. Lanes: 4 (fewer for rows of
    fewer slices) and more up to the row's slices."""
    widest = max(ds, vs)
    options = [lanes for lanes in LANES if lanes == LANES[0] or lanes <= widest]
    result = []
    for lanes in options:
        lanes = min(lanes, 1 << (widest - 1).bit_length())
        chunks = 1
        while chunks <= max_chunks:
            per_chunk = -(-n // chunks)
            size = max(lanes, 4)
            while size <= tiling.MAX_WORKGROUP and (size == max(lanes, 4) or size // lanes * 4 <= per_chunk):
                if _lanes_memory(size, lanes, vs) <= tiling.LANE_MEMORY_VEC4:
                    result.append(Decomposition((lanes, chunks), size, 1, True))
                size *= 2
            chunks *= 2
    return list(dict.fromkeys(result))


def _merge_width(size: int, vs: int, most: int) -> int:
    """Adjacent invocations that merge one slice of a state (attention_lanes.wgsl's PART_R over the subgroups'
    states, merge_lanes.wgsl's MERGE_R over the chunks): up to 4 (always within one subgroup), as many as the
    workgroup has invocations per slice, and no more than the states (`most`) they share."""
    width = 1
    while width * 2 <= min(4, most) and width * 2 * vs <= size:
        width *= 2
    return width


def lanes_merges(dec: Decomposition, vs: int) -> tuple[int, int, int]:
    """(parts, PART_R, MERGE_R): the states merged across subgroups (SUBGROUP invocations a
    subgroup; 1: none) and the invocations per slice of the two merges."""
    lanes, chunks, size = dec.tile[0], dec.tile[1], dec.split
    parts = size // max(lanes, SUBGROUP)
    return parts, _merge_width(size, vs, parts), _merge_width(size, vs, chunks)


def _lanes_work(dec: Decomposition, keys: int, ds: int, vs: int, masked: bool) -> float:
    """Cost units of one invocation over `keys` keys: its blocks of 4 keys (A key and B value slices of each,
    their loads and dot products or multiply-adds, the score's shuffles over the lanes, the mask's 4 reads, one
    online-softmax step on 4 scores), the key groups' merge (shuffles up to SUBGROUP invocations, then through
    workgroup memory: each slice by PART_R invocations over the subgroups' states, a maximum of them all, its
    share rescaled and added, summed by shuffles), the state's store and the last tile's merge of the chunks
    (each slice by MERGE_R invocations over its share of the chunks, online, combined by shuffles)."""
    lanes, chunks, size = dec.tile[0], dec.tile[1], dec.split
    groups = size // lanes
    a, b = -(-ds // lanes), -(-vs // lanes)
    blocks = math.ceil(math.ceil(keys / chunks) / (4 * groups))
    block = (4 * a * (tiling.LOAD + 4) + math.log2(lanes) * tiling.SHUFFLE + (4 * tiling.LOAD if masked else 0)
             + 40 + 4 * b * (tiling.LOAD + 4) + 4 * b)
    levels = math.log2(max(1, min(size, SUBGROUP) // lanes))
    merge_groups = levels * ((b + 1) * tiling.SHUFFLE + 12)
    parts, part_r, merge_r = lanes_merges(dec, vs)
    if parts > 1:  # the states' store, then per round of slices: the maxima, its share, the shuffles, the store
        rounds = math.ceil(vs * part_r / size)
        merge_groups += tiling.SHARED_LEVEL + (b + 1) * tiling.LOAD + rounds * (
            parts * (tiling.LOAD + 2) + math.ceil(parts / part_r) * (2 * tiling.LOAD + 10)
            + math.log2(part_r) * 2 * tiling.SHUFFLE + tiling.LOAD)
    else:
        merge_groups += (b + 1) * tiling.LOAD
    rounds = math.ceil(vs * merge_r / size)
    merge_chunks = 4 + rounds * (math.ceil(chunks / merge_r) * (2 * tiling.LOAD + 16)
                                 + math.log2(merge_r) * (2 * tiling.SHUFFLE + 16) + tiling.LOAD)
    return tiling.OVERHEAD + a * tiling.LOAD + blocks * block + merge_groups + merge_chunks


def _lanes_barriers(dec: Decomposition, n: int) -> int:
    """The key end's uniform load, the merge across subgroups, the last tile's two; with more than 4 lanes, two
    a block of keys (attention/lane_span.wgsl, passed on every adapter)."""
    lanes, groups = dec.tile[0], dec.split // dec.tile[0]
    blocks = math.ceil(math.ceil(n / dec.tile[1]) / (4 * groups))
    return 4 + (2 * blocks if lanes > 4 else 0)


def _lanes_shuffles(dec: Decomposition, n: int, vs: int) -> int:
    """vec4 shuffles of one invocation: per block of 4 keys one per lane level; per key-group level its state
    and B value slices (SUBGROUP invocations a subgroup); per level of the two merges' slices, 2."""
    lanes = dec.tile[0]
    groups = dec.split // lanes
    blocks = math.ceil(math.ceil(n / dec.tile[1]) / (4 * groups))
    levels = math.log2(max(1, min(dec.split, SUBGROUP) // lanes))
    parts, part_r, merge_r = lanes_merges(dec, vs)
    merges = (2 * math.log2(part_r) * math.ceil(vs * part_r / dec.split) if parts > 1 else 0) + (
        2 * math.log2(merge_r) * math.ceil(vs * merge_r / dec.split))
    return int(blocks * math.log2(lanes) + levels * (-(-vs // lanes) + 1) + merges)


def _lanes_spec(dec: Decomposition, fixed: dict, sizes: tuple[int, int, int, int],
                key_end: tuple[Code, bool], locate: str, oc_: int, bindings: list[Binding],
                label: str) -> KernelSpec:
    """The KernelSpec of a key-groups-of-lanes decomposition (one tile a workgroup: row, chunk from its id)."""
    rows, n, ds, vs = sizes
    lanes, chunks, size = dec.tile[0], dec.tile[1], dec.split
    tiles = rows * chunks
    dispatch, nx = codegen.tile_dispatch(tiles, dec)
    a, b = -(-ds // lanes), -(-vs // lanes)
    _, part_r, merge_r = lanes_merges(dec, vs)
    # a key group of more lanes than 4 may span subgroups (smaller than it): their partial scores through
    # workgroup memory (the condition is uniform; the barriers stay outside it)
    span = "" if lanes <= 4 else codegen.fill("attention/lane_span.wgsl", {"LANES": lanes}, "    ")
    states = size
    params = {**fixed, "LOCATE": Code(locate), "KEY_END": key_end[0], "LANES": lanes, "GROUPS": size // lanes,
              "A": a, "B": b, "DS_LAST": ds - 1, "VS_LAST": vs - 1, "DISPATCH_X": nx, "TILES": tiles,
              "TILES_LAST": tiles - 1, "CHUNKS": chunks, "CHUNKS_LAST": chunks - 1, "STATE": vs + 1,
              "BLOCK_KEYS": 4 * (size // lanes), "BLOCK_KEYS_LAST": 4 * (size // lanes) - 1,
              "LANE_SPAN": Code(span), "PART_STATES": states, "PART_VEC4S": states * b,
              "DOTS_MEMORY": Code(f"var<workgroup> part_dots: array<vec4<f32>, {size // 4}>;" if lanes > 4 else ""),
              "PART_R": part_r, "MERGE_R": merge_r}
    fresh = [dataclasses.replace(x) for x in bindings]
    if key_end[1]:  # K and V read up to the position's end: the latency model counts those rows
        for x in fresh[1:3]:
            x.touched = Touched(1, n, by_position=True)
    return KernelSpec("attention_lanes", params, fresh, grid=(tiles * size, 1, 1), workgroup=(size, 1, 1),
                      dispatch=dispatch, out_channels=oc_, label=label)


KERNEL = AttentionKernel()
