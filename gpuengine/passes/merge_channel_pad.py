"""ADD/SUB(a, PAD(x)) where the PAD only appends zero channels (BlazeFace's residual blocks when the channel
count grows): read x zero-extended inside the ADD instead of materializing the padded tensor. The op gets
the internal option `zero_extend`, so it is only merged when the GPU kernel accepts it (the CPU fallback's
schema has no such field)."""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph
from . import kernel_support
from .graph_utils import const, producer, same_grid, sole_consumer, with_fields


def merge_channel_pad(graph: Graph) -> Graph:
    graph = graph.copy()
    for pad in list(graph.ops):
        if pad.code != "PAD" or pad not in graph.ops or not same_grid(graph, pad.inputs[0], pad.outputs[0]):
            continue
        pads = const(graph, pad.inputs[1])
        rank = len(graph.tensors[pad.inputs[0]].shape)
        if pads is None or pads.shape != (rank, 2) or np.any(pads[:-1]) or pads[-1, 0] != 0 or pads[-1, 1] <= 0:
            continue
        user = sole_consumer(graph, pad.outputs[0])
        if user is None or user.code not in ("ADD", "SUB") or user.opt("zero_extend") or len(user.inputs) != 2:
            continue
        position = user.inputs.index(pad.outputs[0])
        if user.inputs[1 - position] == pad.outputs[0] or producer(graph, pad.inputs[0]) is pad:
            continue
        inputs = list(user.inputs)
        inputs[position] = pad.inputs[0]
        merged = with_fields(user, inputs, zero_extend=True)
        if kernel_support.check(merged, graph) is not None:
            continue
        user.inputs, user.options = merged.inputs, merged.options
        graph.ops = [o for o in graph.ops if o is not pad]
    return graph
