"""Fold what a decode step computes from its position alone into the kernels that read it.

litert-torch computes, from the step's `input_pos` (an int32 of one element), the RoPE tables, the attention mask
and the KV-cache write offsets with a dozen one-element or one-row ops, each a dispatch of its own:
  * cos / sin: COS(MUL(CAST(position), inverse frequencies)) and SIN of the same product;
  * the mask: SELECT_V2(all(0 <= i <= R - 1), GATHER_ND(mask table [R, ...], i), fill), i = SELECT(position < 0,
    position + R, position) (a negative index wrapped, then bounds-checked as torch's indexing does);
  * Gemma 3's sliding-window layers: MINIMUM(that mask, SELECT_V2(position - W < j < position + W, inside,
    outside)) over the key columns j (a constant iota);
  * the offsets: PACK([0, position, 0, 0]), or a CAST of a CONCATENATION of floats for transposed caches;
  * cos / sin gathered from constant tables by the position (the mask's pattern, e.g. the toy decoder's).
Here their readers take the position itself: a KV_CACHE_WRITE (with its rotated query) computes the angles
(ROPE_ANGLES: inputs cos, sin become position, frequencies; or position, one [R + 1, 2H] table of cos | sin rows)
and its offsets (OFFSETS_FROM_POSITION), an ATTENTION reads its mask row from the table by the position
(MASK_FROM_POSITION: inputs table with the fill as row R, and the position). The values are the same ops' values:
the same f32 product, the same cos / sin, the same table row. The ops that fed them go when nothing else reads
them. Runs after kv_cache_in_place (which makes the writes).
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op
from ..model.ops import (
    ATTENTION,
    GROUPS,
    KV_CACHE_WRITE,
    MASK_FROM_POSITION,
    OFFSETS_FROM_POSITION,
    QUERY,
    ROPE_ANGLES,
    ROPE_TABLES,
)
from . import kernel_support
from .graph_utils import new_const, with_fields

# the ops of the position math: dropped once nothing reads them (all pure)
POSITION_OPS = frozenset({"RESHAPE", "CAST", "MUL", "COS", "SIN", "LESS", "ADD", "SELECT", "SELECT_V2",
                          "GREATER_EQUAL", "LESS_EQUAL", "LOGICAL_AND", "REDUCE_ALL", "GATHER_ND", "PACK",
                          "CONCATENATION", "SUB", "GREATER", "MINIMUM"})


class _Graph:
    """Producers and constants of a graph, for the matchers."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = {t: op for op in graph.ops for t in op.outputs}
        self.made: dict[tuple, int] = {}  # constants the pass added, by what they were made from

    def made_by(self, t: int, code: str) -> Op | None:
        op = self.producers.get(t)
        return op if op is not None and op.code == code and len(op.outputs) == 1 else None

    def const(self, t: int) -> np.ndarray | None:
        data = self.graph.tensors[t].data if t >= 0 else None
        return None if data is None else np.asarray(data)

    def scalar(self, t: int) -> float | int | None:
        """The value of a one-element constant."""
        data = self.const(t)
        return data.reshape(-1)[0].item() if data is not None and data.size == 1 else None

    def root(self, t: int) -> int:
        """t through the RESHAPEs of one-element tensors in front of it."""
        while self.graph.tensors[t].size == 1 and (op := self.made_by(t, "RESHAPE")) is not None:
            t = op.inputs[0]
        return t

    def position(self, t: int) -> int | None:
        """The run-time int32 of one element that t is (through one-element RESHAPEs)."""
        t = self.root(t)
        tensor = self.graph.tensors[t]
        if tensor.data is not None or tensor.dtype != np.int32 or tensor.size != 1 or tensor.quantization:
            return None
        return t

    def angles(self, cos_t: int, sin_t: int) -> tuple[int, int] | None:
        """(position, frequencies) when cos_t = COS(a) and sin_t = SIN(a), a = MUL(CAST(position), frequencies)."""
        cos, sin = self.made_by(cos_t, "COS"), self.made_by(sin_t, "SIN")
        if cos is None or sin is None or cos.inputs[0] != sin.inputs[0]:
            return None
        mul = self.made_by(cos.inputs[0], "MUL")
        if mul is None or mul.opt("fused_activation_function", 0) not in (0, "NONE"):
            return None
        for x, freq in (mul.inputs, mul.inputs[::-1]):
            cast = self.made_by(self.root(x), "CAST")
            table = self.graph.tensors[freq]
            if cast is None or self.graph.tensors[x].size != 1 \
                    or self.graph.tensors[cast.outputs[0]].dtype != np.float32:
                continue
            if table.data is None or table.dtype != np.float32 or table.quantization:
                continue
            position = self.position(cast.inputs[0])
            shapes = {tuple(self.graph.tensors[t].shape) for t in (cos_t, sin_t, mul.outputs[0])}
            if position is not None and shapes == {tuple(table.shape)}:
                return position, freq
        return None

    def offsets(self, t: int) -> tuple[int, tuple[int | None, ...]] | None:
        """(position, offsets with None where the position goes) when t = PACK of one-element int32 constants and
        the position, or CAST to int32 of a CONCATENATION of one-element float32 constants (whole numbers) and
        CAST(position) (litert-torch's offsets of transposed caches: the position's f32 value is the one the GPU
        holds, int32 tensors being held as exact f32 values there)."""
        if self.graph.tensors[t].dtype != np.int32 or len(self.graph.tensors[t].shape) != 1:
            return None
        pack, floats = self.made_by(t, "PACK"), False
        if pack is None and (cast := self.made_by(t, "CAST")) is not None:
            pack, floats = self.made_by(cast.inputs[0], "CONCATENATION"), True
            if pack is not None and (pack.opt("fused_activation_function", 0) not in (0, "NONE")
                                     or self.graph.tensors[pack.outputs[0]].dtype != np.float32):
                return None
        if pack is None or pack.opt("axis", 0) != 0 or any(self.graph.tensors[x].size != 1 for x in pack.inputs):
            return None
        position, values = None, []
        for x in pack.inputs:
            value = self.scalar(x)
            if isinstance(value, int) and not floats:
                values.append(value)
                continue
            if isinstance(value, float) and floats and value.is_integer() and abs(value) < 2 ** 24:
                values.append(int(value))
                continue
            cast = self.made_by(self.root(x), "CAST") if floats else None
            p = self.position(cast.inputs[0] if cast is not None else x) if floats == (cast is not None) else None
            if p is None or position not in (None, p):
                return None
            position = p
            values.append(None)
        return (position, tuple(values)) if position is not None else None

    def mask(self, t: int) -> tuple[int, np.ndarray, bool] | None:
        """(position, table [R + 1, N] whose row R is the fill, wrap) when t = SELECT_V2(all(0 <= i <= R - 1),
        GATHER_ND(table, i), fill), i = SELECT(position < 0, position + R, position) or the position itself."""
        select = self.made_by(t, "SELECT_V2")
        if select is None:
            return None
        cond, gathered, fill = select.inputs
        gather = self.made_by(gathered, "GATHER_ND")
        fill_value = self.scalar(fill)
        if gather is None or not isinstance(fill_value, float) or self.graph.tensors[fill].dtype != np.float32:
            return None
        table, index = self.const(gather.inputs[0]), gather.inputs[1]
        shape = tuple(self.graph.tensors[t].shape)
        if table is None or table.dtype != np.float32 or self.graph.tensors[gather.inputs[0]].quantization:
            return None
        rows = table.shape[0]
        if self.graph.tensors[index].size != 1 or shape != tuple(self.graph.tensors[gathered].shape) \
                or shape != (1, *table.shape[1:]) or self.graph.tensors[cond].size != 1:
            return None
        wrapped = self.wrapped(index, rows)
        if wrapped is None or not self.in_bounds(cond, index, rows):
            return None
        position, wrap = wrapped
        rows_2d = table.reshape(rows, -1)
        extended = np.concatenate([rows_2d, np.full((1, rows_2d.shape[1]), fill_value, np.float32)])
        return position, extended, wrap

    def windowed_mask(self, t: int) -> tuple[int, np.ndarray, bool, tuple | None] | None:
        """mask(t) and no window, or for t = MINIMUM(mask row, window) the row's match and the window
        (below, above, inside, outside, row first): a column j is inside where position - below < j < position +
        above."""
        found = self.mask(t)
        if found is not None:
            return (*found, None)
        minimum = self.made_by(t, "MINIMUM")
        if minimum is None or len(minimum.inputs) != 2:
            return None
        shape = tuple(self.graph.tensors[t].shape)
        for first, (a, b) in enumerate((minimum.inputs, minimum.inputs[::-1])):
            row, window = self.mask(a), self.window(b, shape[-1])
            if row is None or window is None or row[0] != window[0] or tuple(self.graph.tensors[a].shape) != shape:
                continue
            return (*row, (*window[1:], first == 0))
        return None

    def window(self, t: int, width: int) -> tuple[int, int, int, float, float] | None:
        """(position, below, above, inside, outside) when t (through RESHAPEs) = SELECT_V2(LOGICAL_AND(
        GREATER(iota, position - below), LESS(iota, position + above)), inside, outside), iota = 0 .. width - 1."""
        while (op := self.made_by(t, "RESHAPE")) is not None:
            t = op.inputs[0]
        select = self.made_by(t, "SELECT_V2")
        if select is None or self.graph.tensors[t].size != width or self.graph.tensors[t].dtype != np.float32:
            return None
        cond, inside, outside = select.inputs
        values = self.scalar(inside), self.scalar(outside)
        both = self.made_by(cond, "LOGICAL_AND")
        if both is None or not all(isinstance(v, float) for v in values):
            return None
        bounds: dict[str, tuple[int, int]] = {}
        for x in both.inputs:
            op = self.made_by(x, "GREATER") or self.made_by(x, "LESS")
            iota = self.const(op.inputs[0]) if op is not None else None
            if iota is None or iota.size != width or not np.array_equal(iota.reshape(-1), np.arange(width)):
                return None
            shifted = self.made_by(self.root(op.inputs[1]), "SUB" if op.code == "GREATER" else "ADD")
            if shifted is None or shifted.opt("fused_activation_function", 0) not in (0, "NONE"):
                return None
            p, amount = self.position(shifted.inputs[0]), self.scalar(shifted.inputs[1])
            if p is None or not isinstance(amount, int):
                return None
            bounds[op.code] = (p, amount)
        if set(bounds) != {"GREATER", "LESS"} or bounds["GREATER"][0] != bounds["LESS"][0]:
            return None
        return bounds["GREATER"][0], bounds["GREATER"][1], bounds["LESS"][1], values[0], values[1]

    def table_rows(self, cos_t: int, sin_t: int) -> tuple[int, int, bool] | None:
        """(position, table [R + 1, 2H] of cos | sin rows and their fills, wrap) when cos_t and sin_t are each a
        row of a constant [R, H] table by the same position (mask's pattern); the table is added to the graph once
        per pair of source tables."""
        cos, sin = self.mask(cos_t), self.mask(sin_t)
        if cos is None or sin is None or cos[0] != sin[0] or cos[2] != sin[2] or cos[1].shape != sin[1].shape:
            return None
        if tuple(self.graph.tensors[cos_t].shape) != (1, cos[1].shape[1]):
            return None
        key = ("rope rows", cos_t, sin_t)
        if key not in self.made:
            self.made[key] = new_const(self.graph, cos_t, np.concatenate([cos[1], sin[1]], axis=1),
                                       f"{self.graph.tensors[cos_t].name}/rope_rows_by_position")
        return cos[0], self.made[key], cos[2]

    def wrapped(self, index: int, rows: int) -> tuple[int, bool] | None:
        """(position, wrap) when index is SELECT(LESS(position, 0), ADD(position, rows), position), or (position,
        False) when it is the position itself."""
        t = self.root(index)
        select = self.made_by(t, "SELECT")
        if select is None:
            p = self.position(t)
            return (p, False) if p is not None else None
        less, added, other = select.inputs
        less_op, add_op = self.made_by(less, "LESS"), self.made_by(added, "ADD")
        p = self.position(other)
        if p is None or less_op is None or add_op is None \
                or add_op.opt("fused_activation_function", 0) not in (0, "NONE"):
            return None
        if self.position(less_op.inputs[0]) != p or self.scalar(less_op.inputs[1]) != 0:
            return None
        if self.position(add_op.inputs[0]) != p or self.scalar(add_op.inputs[1]) != rows:
            return None
        return p, True

    def in_bounds(self, cond: int, index: int, rows: int) -> bool:
        """cond is REDUCE_ALL(LOGICAL_AND(GREATER_EQUAL(index, 0), LESS_EQUAL(index, rows - 1)))."""
        reduce = self.made_by(self.root(cond), "REDUCE_ALL")
        if reduce is None or self.graph.tensors[reduce.inputs[0]].size != 1:
            return False
        both = self.made_by(self.root(reduce.inputs[0]), "LOGICAL_AND")
        if both is None:
            return False
        bounds = {}
        for t in both.inputs:
            op = self.made_by(self.root(t), "GREATER_EQUAL") or self.made_by(self.root(t), "LESS_EQUAL")
            if op is None or self.root(op.inputs[0]) != self.root(index):
                return False
            bounds[op.code] = self.scalar(op.inputs[1])
        return bounds == {"GREATER_EQUAL": 0, "LESS_EQUAL": rows - 1}


def fold_position_math(graph: Graph) -> Graph:
    """KV_CACHE_WRITE and ATTENTION ops reading the position instead of what the position math made of it."""
    original, graph = graph, graph.copy()
    match = _Graph(graph)
    changed = False
    for i, op in enumerate(list(graph.ops)):
        if op.code == KV_CACHE_WRITE and not op.opt(ROPE_ANGLES) and not op.opt(OFFSETS_FROM_POSITION):
            folded = _fold_write(graph, op, match)
        elif op.code == ATTENTION and len(op.inputs) == 4 and not op.opt(MASK_FROM_POSITION):
            folded = _fold_mask(graph, op, match)
        else:
            continue
        if folded is not None:
            graph.ops[i] = folded
            changed = True
    if not changed:
        return original
    before = len(graph.ops)
    graph = _drop_unread(graph)
    folded_into = sorted({op.code for op in graph.ops if op.opt(ROPE_ANGLES) or op.opt(OFFSETS_FROM_POSITION)
                          is not None or op.opt(MASK_FROM_POSITION)})
    graph.remarks.append(f"position math: {before - len(graph.ops)} ops computing from the position alone folded "
                         f"into the {' and '.join(folded_into)} ops reading them")
    return graph


def _groups(op: Op) -> list[tuple[int, bool, bool]]:
    """Per write of the op: (its first input, whether it rotates, whether it is a rotated query)."""
    groups = op.opt(GROUPS)
    if not groups:
        return [(0, bool(op.opt(ROPE_TABLES)), False)]
    result, first = [], 0
    for count, _steps, rope, *kind in groups:
        result.append((first, bool(rope) or kind == [QUERY], kind == [QUERY]))
        first += count
    return result


def _fold_write(graph: Graph, op: Op, match: _Graph) -> Op | None:
    """The write with its rotation's angles and its offsets from the position, each where every group's match (the
    angles, the offsets: one fold without the other when only one matches)."""
    inputs, fields = list(op.inputs), {}
    groups = _groups(op)
    rotations = [(first + 1 if query else first + 3) for first, rope, query in groups if rope]
    angles = [match.angles(inputs[c], inputs[c + 1]) for c in rotations]
    rows = [match.table_rows(inputs[c], inputs[c + 1]) for c in rotations]
    if rotations and all(a is not None for a in angles):
        for c, (position, freq) in zip(rotations, angles):
            inputs[c], inputs[c + 1] = position, freq
        fields[ROPE_ANGLES] = True
    elif rotations and all(r is not None for r in rows) and len({r[2] for r in rows}) == 1:
        for c, (position, table, _wrap) in zip(rotations, rows):
            inputs[c], inputs[c + 1] = position, table
        fields[ROPE_ANGLES] = ("rows", rows[0][2])
    offsets = [None if query else match.offsets(inputs[first + 2]) for first, _rope, query in groups]
    if all(o is not None for (_f, _r, query), o in zip(groups, offsets) if not query):
        for (first, _rope, _query), found in zip(groups, offsets):
            if found is not None:
                inputs[first + 2] = found[0]
        per_write = tuple(None if o is None else o[1] for o in offsets)
        fields[OFFSETS_FROM_POSITION] = per_write if op.opt(GROUPS) else per_write[0]
    if not fields:
        return None
    folded = with_fields(op, inputs, **fields)
    return folded if kernel_support.check(folded, graph) is None else None


def _fold_mask(graph: Graph, op: Op, match: _Graph) -> Op | None:
    found = match.windowed_mask(op.inputs[3])
    if found is None:
        return None
    position, table, wrap, window = found
    key = ("mask rows", table.tobytes())
    if key not in match.made:  # one table for every attention reading the same rows (a model's layers)
        match.made[key] = new_const(graph, op.inputs[3], table, f"{graph.tensors[op.inputs[3]].name}/rows_by_position")
    shape = tuple(graph.tensors[op.inputs[3]].shape)
    folded = with_fields(op, [*op.inputs[:3], match.made[key], position],
                         **{MASK_FROM_POSITION: (shape, wrap, window)})
    return folded if kernel_support.check(folded, graph) is None else None


def _drop_unread(graph: Graph) -> Graph:
    """Remove position-math ops whose outputs nothing reads (their readers now read the position)."""
    while True:
        readers = graph.consumers()
        dead = [o for o in graph.ops if o.code in POSITION_OPS and o.outputs
                and not any(readers.get(t) or t in graph.outputs for t in o.outputs)]
        if not dead:
            return graph
        gone = {id(o) for o in dead}
        graph.ops = [o for o in graph.ops if id(o) not in gone]
