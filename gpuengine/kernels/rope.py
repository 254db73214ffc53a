"""ROPE: an internal op (passes/fuse_rope.py) for the rotary embedding as litert-torch writes it: SLICE of the two
halves of the head, four MULs by cos / sin, SUB, ADD, CONCATENATION: seven dispatches, here one.

Inputs x, cos, sin; x [..., 2H] may be read through a layout view (`view_x`: the RESHAPE / SLICE split of a fused
QKV projection's output, read where it lies); cos and sin broadcast to [..., H] (per position, shared by the heads).
`rope_lanes` is shared with kernels/kv_cache.py, whose cache write applies it to the key rows it stores.
"""

from __future__ import annotations

import numpy as np

from ..layout import slices, to_bhwc
from ..model.ir import Graph, Op
from . import layout_view
from .base import Binding, Code, KernelSpec, Lowering
from .common import float_tensors
from .dynamic_index import _source
from .index_map import Ix, storage_index

ROPE = "ROPE"
VIEW_X = "view_x"


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


def rope_lanes(x: str, steps: tuple | None, shape: tuple[int, ...], rows: list[Ix],
               cos_shape: tuple[int, ...], sin_shape: tuple[int, ...], cos: str = "cos_t", sin: str = "sin_t") -> str:
    """WGSL setting `value[l]` to the rotated element at channel `c` (a u32 in scope) of row `rows` of x."""
    half = shape[-1] // 2
    cx = Ix("cx", np.int64(0))
    j = Ix("j", np.int64(0))
    return " ".join([
        f"let j = c % {half}u; let lo = c < {half}u;",
        f"let xa = {view_read(x, steps, shape, [*rows, Ix('c', np.int64(0))])};",
        f"let cx = select(c - {half}u, c + {half}u, lo); let xb = {view_read(x, steps, shape, [*rows, cx])};",
        f"let cs = {view_read(cos, None, cos_shape, table_coords(cos_shape, rows, j))};",
        f"let sn = {view_read(sin, None, sin_shape, table_coords(sin_shape, rows, j))};",
        "value[l] = select(xa * cs + xb * sn, xa * cs - xb * sn, lo);"])


class RopeKernel:
    ops = (ROPE,)
    internal_ops = (ROPE,)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 3 or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"{ROPE} expects x, cos, sin and 1 output"
        reason = float_tensors(op, graph)
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
        return rope_check(x, *(tuple(graph.tensors[t].shape) for t in op.inputs[1:]))

    def build(self, op: Op, graph: Graph) -> Lowering:
        x_t, cos_t, sin_t = op.inputs
        out = op.outputs[0]
        shape = logical_x(op, graph)
        b, h, w, c = to_bhwc(shape)
        rows = {1: [], 2: ["ob"], 3: ["ob", "ox"], 4: ["ob", "oy", "ox"]}[len(shape)]
        row_ix = [Ix.const(0) if d == 1 else Ix(n, np.int64(0)) for d, n in zip(shape[:-1], rows)]
        lane = rope_lanes("xs", op.opt(VIEW_X), shape, row_ix, tuple(graph.tensors[cos_t].shape),
                          tuple(graph.tensors[sin_t].shape))
        bindings = [Binding("xs", tensor=x_t, element="S1"), _source(graph, cos_t, "cos_t"),
                    _source(graph, sin_t, "sin_t"), Binding("dst", tensor=out, writable=True)]
        view = " (view x)" if op.opt(VIEW_X) else ""
        return [KernelSpec("rope", {"S": slices(c), "H": h, "W": w, "C": c, "LANE": Code(lane)}, bindings,
                           grid=(w, h, b * slices(c)), out_channels=c, label=f"{ROPE} {shape}{view}")]


KERNEL = RopeKernel()
