"""MUL(x, gate) with a per-channel, run-time gate [B|1, 1, 1, C] (squeeze-excitation) whose only reader is a
1x1 CONV_2D: the conv scales its input while loading it (internal option `input_scale`, gate as input 3),
so the MUL is neither dispatched nor materialized. The gate is computed from x itself, so no kernel could
host this MUL as an epilogue. Only when the conv kernel accepts the merged op (the CPU fallback could not)."""

from __future__ import annotations

from ..kernels import registry
from ..model.ir import Graph
from .graph_utils import sole_consumer, with_fields


def fuse_input_scale(graph: Graph) -> Graph:
    graph = graph.copy()
    for mul in list(graph.ops):
        if mul.code != "MUL" or len(mul.inputs) != 2 or int(mul.opt("fused_activation_function", 0) or 0):
            continue
        out_shape = graph.tensors[mul.outputs[0]].shape
        shapes = [graph.tensors[t].shape for t in mul.inputs]
        if len(out_shape) != 4 or any(graph.tensors[t].data is not None for t in mul.inputs):
            continue
        full = [k for k in (0, 1) if shapes[k] == out_shape]
        if len(full) != 1 or len(shapes[1 - full[0]]) != 4 or shapes[1 - full[0]][1:3] != (1, 1):
            continue
        x, gate = mul.inputs[full[0]], mul.inputs[1 - full[0]]
        conv = sole_consumer(graph, mul.outputs[0])
        if conv is None or conv.code != "CONV_2D" or conv.inputs[0] != mul.outputs[0] or len(conv.inputs) > 3 \
                or mul.outputs[0] in conv.inputs[1:]:
            continue
        inputs = [x, *conv.inputs[1:]] + [-1] * (3 - len(conv.inputs)) + [gate]
        merged = with_fields(conv, inputs, input_scale=True)
        if registry.check(merged, graph) is not None:
            continue
        conv.inputs, conv.options = merged.inputs, merged.options
        graph.ops = [o for o in graph.ops if o is not mul]
    return graph
