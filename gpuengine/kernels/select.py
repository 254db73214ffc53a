"""Float comparisons (-> BOOL) and SELECT / SELECT_V2, with numpy-style broadcasting.

A BOOL tensor lives on the GPU as float 0/1 vec4s. The runtime exchanges only float32 across partition
boundaries, so a comparison runs on the GPU only when its result never leaves the GPU: it is not a graph
output and every consumer is a SELECT/SELECT_V2 that runs on the GPU and reads it as its condition. A select
runs on the GPU when x/y are float and its condition is such a comparison or a constant bool.
Both checks are local (neither calls the other's full `supports`), so they agree without recursion.
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op
from .base import Lowering
from .common import broadcastable, float_tensors
from .elementwise import elementwise_spec

COMPARE = {
    "LESS": "a < b", "LESS_EQUAL": "a <= b", "GREATER": "a > b", "GREATER_EQUAL": "a >= b",
    "EQUAL": "a == b", "NOT_EQUAL": "a != b",
}
SELECTS = ("SELECT", "SELECT_V2")


def _rank_ok(graph: Graph, ts: list[int]) -> str | None:
    for t in ts:
        if len(graph.tensors[t].shape) > 4:
            return f"tensor {graph.tensors[t].name!r} has rank {len(graph.tensors[t].shape)} (> 4)"
    return None


def _compare_local(op: Op, graph: Graph) -> str | None:
    """Everything about a comparison except where its result goes."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        return "expects 2 inputs and 1 output"
    for t in op.inputs:
        if graph.tensors[t].dtype != np.float32:
            return f"input {graph.tensors[t].name!r} is {graph.tensors[t].dtype}; the GPU compares float32"
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


def _select_local(op: Op, graph: Graph) -> str | None:
    """Everything about a select except whether the comparison feeding its condition runs on the GPU."""
    if len(op.inputs) != 3 or len(op.outputs) != 1 or min(op.inputs) < 0:
        return "expects 3 inputs and 1 output"
    reason = float_tensors(op, graph, inputs=[1, 2]) or _rank_ok(graph, [op.inputs[0]])
    if reason:
        return reason
    for t in op.inputs[1:]:
        if graph.tensors[t].dtype != np.float32:
            return f"x/y {graph.tensors[t].name!r} is {graph.tensors[t].dtype}; only float32 runs on the GPU"
    cond = graph.tensors[op.inputs[0]]
    if cond.dtype != np.bool_:
        return f"condition is {cond.dtype}, expected bool"
    x_shape = graph.tensors[op.inputs[1]].shape
    if op.code == "SELECT" and cond.data is None and len(cond.shape) == 1 and len(x_shape) > 1 \
            and cond.shape[0] > 1:
        return "a rank-1 SELECT condition spanning x's first axis must be a constant on the GPU"
    return _select_shapes(op, graph)


def _compare_placement(op: Op, graph: Graph) -> str | None:
    """A comparison's bool result must stay on the GPU: consumed only as the condition of GPU selects."""
    out = op.outputs[0]
    boundary = "bool output crosses a partition boundary"
    if out in graph.outputs:
        return f"{boundary} (it is a model output)"
    for i in graph.consumers().get(out, []):
        user = graph.ops[i]
        if user.code not in SELECTS or user.inputs[0] != out or out in user.inputs[1:]:
            return f"{boundary} (read by {user.code}, which takes no GPU bool)"
        reason = _select_local(user, graph)
        if reason:
            return f"{boundary} (read by {user.code}, which runs on the CPU: {reason})"
    return None


class CompareSelectKernel:
    ops = tuple(COMPARE) + SELECTS

    def supports(self, op: Op, graph: Graph) -> str | None:
        if op.code in COMPARE:
            return _compare_local(op, graph) or _compare_placement(op, graph)
        reason = _select_local(op, graph)
        if reason:
            return reason
        cond = op.inputs[0]
        if graph.tensors[cond].data is not None:
            return None
        producer = graph.producers().get(cond)
        src = graph.ops[producer] if producer is not None else None
        if src is None or src.code not in COMPARE:
            return "condition is neither a constant nor a float comparison computed on the GPU"
        reason = _compare_local(src, graph) or _compare_placement(src, graph)
        return f"condition {src.code} runs on the CPU: {reason}" if reason else None

    def build(self, op: Op, graph: Graph) -> Lowering:
        shape = {t: graph.tensors[t].shape for t in op.inputs}
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
