"""Comparisons (-> BOOL), LOGICAL_AND / OR / NOT and SELECT / SELECT_V2, with numpy-style broadcasting.

A BOOL tensor lives on the GPU as 1.0 / 0.0 and an int32 one as its exact f32 value (kernels/common.py
EXACT_TYPES; both stored f32 in every precision), so comparisons of float32 or int32 operands, the logic ops of
mask building and selects of float32 or int32 values all run on the GPU; bools and ints cross partition and
host boundaries as their dtype (runtime/program.py).
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from .base import Lowering
from .common import broadcastable, float_tensors
from .elementwise import elementwise_spec

COMPARE = {
    "LESS": "a < b", "LESS_EQUAL": "a <= b", "GREATER": "a > b", "GREATER_EQUAL": "a >= b",
    "EQUAL": "a == b", "NOT_EQUAL": "a != b",
}
SELECTS = ("SELECT", "SELECT_V2")
LOGIC = {"LOGICAL_AND": "select(vec4<f32>(0.0), vec4<f32>(1.0), (a != vec4<f32>(0.0)) & (b != vec4<f32>(0.0)))",
         "LOGICAL_OR": "select(vec4<f32>(0.0), vec4<f32>(1.0), (a != vec4<f32>(0.0)) | (b != vec4<f32>(0.0)))",
         "LOGICAL_NOT": "select(vec4<f32>(1.0), vec4<f32>(0.0), a != vec4<f32>(0.0))"}


def _rank_ok(graph: Graph, ts: list[int]) -> str | None:
    for t in ts:
        if len(graph.tensors[t].shape) > 4:
            return f"tensor {graph.tensors[t].name!r} has rank {len(graph.tensors[t].shape)} (> 4)"
    return None


def _compare_local(op: Op, graph: Graph) -> str | None:
    """A comparison of two float32 or two int32 operands."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        return "expects 2 inputs and 1 output"
    dtypes = {graph.tensors[t].dtype for t in op.inputs}
    for t in op.inputs:
        tensor = graph.tensors[t]
        if tensor.dtype not in (np.float32, np.int32) or tensor.quantization is not None or len(dtypes) > 1:
            return f"input {tensor.name!r} is {tensor.dtype}; the GPU compares float32 or int32 (of one type)"
    out = graph.tensors[op.outputs[0]]
    if out.dtype != np.bool_:
        return f"output is {out.dtype}, expected bool"
    reason = _rank_ok(graph, [*op.inputs, *op.outputs])
    if reason:
        return reason
    a, b = (graph.tensors[t].shape for t in op.inputs)
    return None if broadcastable(a, b, out.shape) else f"shapes {a} and {b} do not broadcast to {out.shape}"


def _select_shapes(op: Op, graph: Graph) -> str | None:
    c, x, y = (graph.tensors[t].shape for t in op.inputs)
    out = graph.tensors[op.outputs[0]].shape
    if op.code == "SELECT_V2":
        try:
            ok = tuple(np.broadcast_shapes(c, x, y)) == tuple(out)
        except ValueError:
            ok = False
        return None if ok else f"shapes {c}, {x}, {y} do not broadcast to {out}"
    # SELECT (v1): x, y, output share one shape; the condition is that shape, a scalar or x's first axis.
    if not (x == y == out):
        return f"SELECT needs equal x/y/output shapes, got {x}, {y}, {out}"
    if c == x or len(c) == 0 or (len(c) == 1 and len(x) >= 1 and c[0] == x[0]):
        return None
    return f"condition shape {c} does not fit x shape {x}"


def _logic_local(op: Op, graph: Graph) -> str | None:
    arity = 1 if op.code == "LOGICAL_NOT" else 2
    if len(op.inputs) != arity or len(op.outputs) != 1 or min(op.inputs) < 0:
        return f"expects {arity} input(s) and 1 output"
    for t in [*op.inputs, *op.outputs]:
        if graph.tensors[t].dtype != np.bool_:
            return f"tensor {graph.tensors[t].name!r} is {graph.tensors[t].dtype}, expected bool"
    reason = _rank_ok(graph, [*op.inputs, *op.outputs])
    if reason:
        return reason
    shapes = [graph.tensors[t].shape for t in op.inputs]
    out = graph.tensors[op.outputs[0]].shape
    if not broadcastable(shapes[0], shapes[-1], out):
        return f"shapes {shapes} do not broadcast to {out}"
    return None


def _select_local(op: Op, graph: Graph) -> str | None:
    """A select of float32 or int32 values (x, y and the output of one type) by a bool condition."""
    if len(op.inputs) != 3 or len(op.outputs) != 1 or min(op.inputs) < 0:
        return "expects 3 inputs and 1 output"
    reason = float_tensors(op, graph, inputs=[1, 2], integers=True) or _rank_ok(graph, [op.inputs[0]])
    if reason:
        return reason
    dtypes = {graph.tensors[t].dtype for t in [*op.inputs[1:], *op.outputs]}
    for t in op.inputs[1:]:
        if graph.tensors[t].dtype not in (np.float32, np.int32) or len(dtypes) > 1:
            return f"x/y {graph.tensors[t].name!r} is {graph.tensors[t].dtype}; the GPU selects float32 or int32"
    cond = graph.tensors[op.inputs[0]]
    if cond.dtype != np.bool_:
        return f"condition is {cond.dtype}, expected bool"
    x_shape = graph.tensors[op.inputs[1]].shape
    if op.code == "SELECT" and cond.data is None and len(cond.shape) == 1 and len(x_shape) > 1 \
            and cond.shape[0] > 1:
        return "a rank-1 SELECT condition spanning x's first axis must be a constant on the GPU"
    return _select_shapes(op, graph)


class CompareSelectKernel:
    ops = tuple(COMPARE) + SELECTS + tuple(LOGIC)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if op.code in COMPARE:
            return _compare_local(op, graph)
        if op.code in LOGIC:
            return _logic_local(op, graph)
        return _select_local(op, graph)

    def build(self, op: Op, graph: Graph) -> Lowering:
        shape = {t: graph.tensors[t].shape for t in op.inputs}
        if op.code in LOGIC:
            names = ("a", "b")
            return [elementwise_spec(op, graph, [(n, t, shape[t]) for n, t in zip(names, op.inputs)], LOGIC[op.code])]
        if op.code in COMPARE:
            a, b = op.inputs
            expr = f"select(vec4<f32>(0.0), vec4<f32>(1.0), {COMPARE[op.code]})"
            return [elementwise_spec(op, graph, [("a", a, shape[a]), ("b", b, shape[b])], expr)]
        c, x, y = op.inputs
        c_shape = shape[c]
        if op.code == "SELECT" and len(c_shape) == 1 and len(shape[x]) > 1:
            c_shape = c_shape + (1,) * (len(shape[x]) - 1)  # one condition per slice along x's first axis
        expr = "select(b, a, c != vec4<f32>(0.0))"
        operands = [("c", c, c_shape), ("a", x, shape[x]), ("b", y, shape[y])]
        return [elementwise_spec(op, graph, operands, expr)]


KERNEL = CompareSelectKernel()
