"""A 1x1 CONV_2D on a 1x1 map (squeeze-excitation blocks, classifier heads) becomes FULLY_CONNECTED: the same
dot products, but the FC kernel spreads one long row over a workgroup (GEMV) instead of giving each output
slice one invocation, and it needs no spatial indexing. Stride and SAME/VALID do not matter at 1x1: the only
output pixel reads the only input pixel."""

from __future__ import annotations

import dataclasses

from tflite.BuiltinOperator import BuiltinOperator

from ..model.builder import make_options
from ..model.ir import Graph, Op
from . import kernel_support
from .graph_utils import const, new_const


def _as_fully_connected(graph: Graph, op: Op) -> Op | None:
    if op.code != "CONV_2D" or len(op.inputs) < 2 or len(op.outputs) != 1:
        return None
    if op.opt("explicit_padding") is not None and any(int(v) for v in op.opt("explicit_padding")):
        return None
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    weights = const(graph, op.inputs[1])
    if weights is None or weights.ndim != 4 or len(x.shape) != 4 or len(out.shape) != 4:
        return None
    o, kh, kw, i = weights.shape
    b, h, w, c = x.shape
    if (kh, kw, h, w) != (1, 1, 1, 1) or i != c or tuple(out.shape) != (b, 1, 1, o):
        return None  # (i != c: a grouped conv is not one matrix product)
    w2d = new_const(graph, op.inputs[1], weights.reshape(o, i), graph.tensors[op.inputs[1]].name + "/fc")
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    options = make_options("FULLY_CONNECTED", {
        "fused_activation_function": int(op.opt("fused_activation_function", 0) or 0), "keep_num_dims": True})
    fc = dataclasses.replace(op, code="FULLY_CONNECTED", builtin_code=BuiltinOperator.FULLY_CONNECTED,
                             inputs=[op.inputs[0], w2d, bias], outputs=list(op.outputs), options=options)
    if kernel_support.check(fc, graph) is not None:
        graph.tensors.pop()  # the reshaped weights are unused: keep the tensor list as it was
        return None
    return fc


def conv_to_fully_connected(graph: Graph) -> Graph:
    graph = graph.copy()
    for k, op in enumerate(graph.ops):
        fc = _as_fully_connected(graph, op)
        if fc is not None:
            graph.ops[k] = fc
    return graph
