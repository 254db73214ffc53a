"""Global average pooling (the filter covers the whole map) becomes MEAN over H and W, whose kernel reduces
in parallel instead of one invocation looping over every pixel."""

from __future__ import annotations

import numpy as np
from tflite.BuiltinOperator import BuiltinOperator

from ..model.builder import make_options
from ..model.ir import Graph, Op
from . import kernel_support
from .graph_utils import new_const


def pool_to_mean(graph: Graph) -> Graph:
    graph = graph.copy()
    for i, op in enumerate(graph.ops):
        if op.code != "AVERAGE_POOL_2D" or int(op.opt("fused_activation_function", 0) or 0):
            continue
        _, h, w, _ = graph.tensors[op.inputs[0]].shape
        out = graph.tensors[op.outputs[0]].shape
        if op.opt("filter_height") != h or op.opt("filter_width") != w or tuple(out[1:3]) != (1, 1) or h * w < 64:
            continue
        axes = new_const(graph, op.inputs[0], np.array([1, 2], np.int32), graph.tensors[op.outputs[0]].name + "/axes")
        mean = Op(index=op.index, code="MEAN", inputs=[op.inputs[0], axes], outputs=list(op.outputs),
                  options=make_options("MEAN", {"keep_dims": True}), builtin_code=BuiltinOperator.MEAN)
        if kernel_support.check(mean, graph) is None:
            graph.ops[i] = mean
    return graph
