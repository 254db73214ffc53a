"""ROPE: an internal op (passes/fuse_rope.py) for the rotary embedding as litert-torch writes it: SLICE of the two
halves of the head, four MULs by cos / sin, SUB, ADD, CONCATENATION: seven dispatches, here one.

Inputs x, cos, sin; x [..., 2H] may be read through a layout view (`view_x`: the RESHAPE / SLICE split of a fused
QKV projection's output, read where it lies); cos and sin broadcast to [..., H] (per position, shared by the heads).
Optional inputs scale, offset, epsilon (constants: [2H], [2H], a scalar): x is first RMS-normalized over its last
axis, x * inverseSqrt(mean(x^2) + epsilon) * scale + offset (the query / key norm of Gemma 3 and Qwen 3, which
litert-torch writes between the QKV split and the rotation; passes/fuse_rope.py). Each lane sums its row's squares
itself: a row is one head (64-256 values), so this costs reads, not a dispatch and the copies of the split.
`rope_lanes` is shared with kernels/kv_cache.py, whose cache write applies it to the key rows it stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import ROPE, ROPE_ANGLES, VIEW_X
from ..codegen import literal
from ..layout import slices, to_bhwc
from . import layout_view
from .base import Binding, Code, KernelSpec, Lowering
from .common import float_tensors
from .dynamic_index import _source
from .index_map import Ix, storage_index
from .wgsl_math import helpers_for


def logical_x(op: Op, graph: Graph) -> tuple[int, ...]:
    steps = op.opt(VIEW_X)
    return tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[op.inputs[0]].shape)


def view_read(name: str, steps: tuple | None, shape: tuple[int, ...], coords: list[Ix]) -> str:
    """WGSL f32 of logical `coords` of a tensor of logical `shape` bound as `name` (S1), through `steps`."""
    if steps:
        coords, shape = layout_view.backward(tuple(steps), coords), tuple(steps[0].in_shape)
    flat, _ = storage_index(shape, coords)
    return f"f32({name}[{flat.code}])"


def table_coords(table: tuple[int, ...], rows: list[Ix], j: Ix) -> list[Ix]:
    """Coordinates in a cos / sin table broadcasting to [*rows, H] of row `rows`, channel j."""
    full = [*rows, j]
    out = []
    for axis, dim in enumerate(table):
        src = full[len(full) - len(table) + axis]
        out.append(Ix.const(0) if dim == 1 else src)
    return out


def rope_check(x: tuple[int, ...], cos: tuple[int, ...], sin: tuple[int, ...]) -> str | None:
    if not x or x[-1] % 2:
        return f"rotary width {x[-1] if x else 0} is not even"
    half = (*x[:-1], x[-1] // 2)
    for table in (cos, sin):
        if len(table) > len(half) or table[-1] != half[-1]:
            return f"table {table} does not broadcast to {half}"
        try:
            if np.broadcast_shapes(table, half) != half:
                return f"table {table} does not broadcast to {half}"
        except ValueError:
            return f"table {table} does not broadcast to {half}"
    return None


@dataclass(frozen=True)
class RowNorm:
    """An RMS normalization of x's rows before the rotation: bound names of its scale and offset, its epsilon."""

    scale: str
    offset: str
    epsilon: float


def norm_check(graph: Graph, inputs: list[int], width: int) -> str | None:
    """Why constants scale, offset, epsilon cannot be a RowNorm of rows of `width` values (None: they can)."""
    scale, offset, eps = (graph.tensors[t] for t in inputs)
    if any(t.data is None or t.dtype != np.float32 or t.quantization for t in (scale, offset, eps)):
        return "the row norm's scale, offset and epsilon must be float32 constants"
    if scale.size != width or offset.size != width or eps.size != 1:
        return f"the row norm's scale and offset must hold {width} values, epsilon one"
    value = float(np.asarray(eps.data).reshape(-1)[0])
    return None if np.isfinite(value) and value >= 0 else f"epsilon {value} must be finite and >= 0"


def epsilon_of(graph: Graph, t: int) -> float:
    return float(np.asarray(graph.tensors[t].data, np.float32).reshape(-1)[0])


def table_shapes(op: Op, graph: Graph, first: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of the cos / sin tables of a rotation whose tables are inputs first, first + 1: with ROPE_ANGLES
    (passes/fold_position_math.py) the inputs are the position and the frequencies, the tables the frequencies'
    (or, for table rows by the position, a row [1, H] of the [R + 1, 2H] cos | sin table)."""
    if op.opt(ROPE_ANGLES):
        second = tuple(graph.tensors[op.inputs[first + 1]].shape)
        row = second if op.opt(ROPE_ANGLES) is True else (1, second[-1] // 2)
        return row, row
    return tuple(graph.tensors[op.inputs[first]].shape), tuple(graph.tensors[op.inputs[first + 1]].shape)


def angles_of(op: Op, graph: Graph, first: int) -> bool | tuple[str, int, bool]:
    """rope_lanes' `angles` for a rotation whose tables are inputs first, first + 1: False (tables), True
    (position, frequencies) or ("rows", R, wrap) (position, the [R + 1, 2H] cos | sin table)."""
    mode = op.opt(ROPE_ANGLES)
    if isinstance(mode, tuple):
        return ("rows", graph.tensors[op.inputs[first + 1]].shape[0] - 1, bool(mode[1]))
    return bool(mode)


def angles_check(op: Op, graph: Graph, first: int) -> str | None:
    """Why inputs first, first + 1 of a ROPE_ANGLES rotation are not (position, frequencies), or (position, table
    rows) (None: they are)."""
    mode = op.opt(ROPE_ANGLES)
    if not mode:
        return None
    position, second = (graph.tensors[t] for t in op.inputs[first:first + 2])
    if position.data is not None or position.dtype != np.int32 or position.size != 1:
        return "the rotation's position must be a run-time int32 of one element"
    if second.data is None or second.dtype != np.float32 or second.quantization:
        return "the rotation's frequencies or table rows must be float32 constants"
    if mode is not True and (not isinstance(mode, tuple) or len(mode) != 2 or mode[0] != "rows"
                             or len(second.shape) != 2 or second.shape[0] < 2 or second.shape[1] % 2):
        return f"{ROPE_ANGLES} must be True or ('rows', wrap) with a [rows + 1, 2H] table"
    return None


def rope_lanes(x: str, steps: tuple | None, shape: tuple[int, ...], rows: list[Ix],
               cos_shape: tuple[int, ...], sin_shape: tuple[int, ...], cos: str = "cos_t", sin: str = "sin_t",
               norm: RowNorm | None = None, angles: bool | tuple[str, int, bool] = False) -> str:
    """WGSL setting `value[l]` to the rotated element at channel `c` (a u32 in scope) of row `rows` of x (first
    RMS-normalized over its row with `norm`). With `angles` True, `cos` is the position and `sin` the frequencies:
    cos and sin of f32(position) * frequency, as CAST, MUL, COS and SIN compute them (kernels/elementwise.py); with
    ("rows", R, wrap), `sin` is a [R + 1, 2H] table of cos | sin rows: row position (+ R where negative when wrap), or
    row R (the fill) out of [0, R), as GATHER_ND and SELECT_V2 read them."""
    half = shape[-1] // 2
    cx = Ix("cx", np.int64(0))
    read_a = view_read(x, steps, shape, [*rows, Ix('c', np.int64(0))])
    read_b = view_read(x, steps, shape, [*rows, cx])
    prologue = []
    if norm is not None:
        width = shape[-1]
        square = view_read(x, steps, shape, [*rows, Ix("q", np.int64(0))])
        prologue = [f"var ss = 0.0; for (var q = 0u; q < {width}u; q++) {{ let v = {square}; ss += v * v; }}",
                    f"let inv = inverseSqrt(ss / {literal(float(width))} + {literal(norm.epsilon)});"]
        scale = (view_read(norm.scale, None, (width,), [Ix("c", np.int64(0))]),
                 view_read(norm.scale, None, (width,), [cx]))
        offset = (view_read(norm.offset, None, (width,), [Ix("c", np.int64(0))]),
                  view_read(norm.offset, None, (width,), [cx]))
        read_a = f"({read_a} * inv * {scale[0]} + {offset[0]})"
        read_b = f"({read_b} * inv * {scale[1]} + {offset[1]})"
    tables = rotation_tables(cos, sin, cos_shape, sin_shape, rows, half, angles)
    return " ".join([
        *prologue,
        f"let j = c % {half}u; let lo = c < {half}u;",
        f"let xa = {read_a};",
        f"let cx = select(c - {half}u, c + {half}u, lo); let xb = {read_b};",
        *tables,
        "value[l] = select(xa * cs + xb * sn, xa * cs - xb * sn, lo);"])


def rotation_tables(cos: str, sin: str, cos_shape: tuple[int, ...], sin_shape: tuple[int, ...], rows: list[Ix],
                    half: int, angles: bool | tuple[str, int, bool] = False) -> list[str]:
    """WGSL setting `cs` and `sn`, the cos and sin of the rotation of pair `j` (a u32 in scope, < half) of row
    `rows`, from the bound tables (or position and frequencies, or table rows: `angles`, as rope_lanes)."""
    j = Ix("j", np.int64(0))
    if isinstance(angles, tuple):
        _, count, wrap = angles
        table = (count + 1, 2 * half)
        wrapped = f"select(pp, pp + {count}i, pp < 0i)" if wrap else "pp"
        return [f"let pp = i32(f32({cos}[0])); let pq = {wrapped};",
                f"let pr = select({count}u, u32(pq), pq >= 0i && pq < {count}i); let jh = j + {half}u;",
                f"let cs = {view_read(sin, None, table, [Ix('pr', np.int64(0)), j])};",
                f"let sn = {view_read(sin, None, table, [Ix('pr', np.int64(0)), Ix('jh', np.int64(0))])};"]
    if angles:
        freq = view_read(sin, None, sin_shape, table_coords(sin_shape, rows, j))
        angle = f"turns4(vec4<f32>(f32({cos}[0]) * {freq}))"
        return [f"let ang = {angle};", "let cs = cos(ang).x;", "let sn = sin(ang).x;"]
    return [f"let cs = {view_read(cos, None, cos_shape, table_coords(cos_shape, rows, j))};",
            f"let sn = {view_read(sin, None, sin_shape, table_coords(sin_shape, rows, j))};"]


class RopeKernel:
    ops = (ROPE,)
    internal_ops = (ROPE,)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) not in (3, 6) or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"{ROPE} expects x, cos, sin[, scale, offset, epsilon] and 1 output"
        reason = float_tensors(op, graph, integers=bool(op.opt(ROPE_ANGLES)))
        if reason:
            return reason
        steps = op.opt(VIEW_X)
        if steps and layout_view.check(tuple(steps)):
            return layout_view.check(tuple(steps))
        x = logical_x(op, graph)
        if graph.tensors[op.inputs[0]].data is not None or not 1 <= len(x) <= 4:
            return "x must be a run-time tensor of rank 1..4"
        if tuple(graph.tensors[op.outputs[0]].shape) != x:
            return f"output {graph.tensors[op.outputs[0]].shape} is not x's shape {x}"
        if len(op.inputs) == 6 and norm_check(graph, op.inputs[3:], x[-1]):
            return norm_check(graph, op.inputs[3:], x[-1])
        return angles_check(op, graph, 1) or rope_check(x, *table_shapes(op, graph, 1))

    def build(self, op: Op, graph: Graph) -> Lowering:
        x_t, cos_t, sin_t = op.inputs[:3]
        out = op.outputs[0]
        shape = logical_x(op, graph)
        b, h, w, c = to_bhwc(shape)
        rows = {1: [], 2: ["ob"], 3: ["ob", "ox"], 4: ["ob", "oy", "ox"]}[len(shape)]
        row_ix = [Ix.const(0) if d == 1 else Ix(n, np.int64(0)) for d, n in zip(shape[:-1], rows)]
        norm = RowNorm("scale_t", "offset_t", epsilon_of(graph, op.inputs[5])) if len(op.inputs) == 6 else None
        lane = rope_lanes("xs", op.opt(VIEW_X), shape, row_ix, *table_shapes(op, graph, 1), norm=norm,
                          angles=angles_of(op, graph, 1))
        bindings = [Binding("xs", tensor=x_t, element="S1"), _source(graph, cos_t, "cos_t"),
                    _source(graph, sin_t, "sin_t"), Binding("dst", tensor=out, writable=True)]
        if norm is not None:
            bindings[3:3] = [_source(graph, op.inputs[3], "scale_t"), _source(graph, op.inputs[4], "offset_t")]
        view = (" (view x)" if op.opt(VIEW_X) else "") + (" (RMS_NORM of x)" if norm else "")
        helpers = Code("\n".join(helpers_for(lane)))
        return [KernelSpec("rope", {"S": slices(c), "H": h, "W": w, "C": c, "LANE": Code(lane), "HELPERS": helpers},
                           bindings,
                           grid=(w, h, b * slices(c)), out_channels=c, label=f"{ROPE} {shape}{view}")]


KERNEL = RopeKernel()
