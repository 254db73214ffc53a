"""Rank-5 (and higher) tensors whose leading axes are 1, between RESHAPE and BROADCAST_TO ops, made rank 4.

GPU tensors are rank <= 4 (layout.py). litert-torch's grouped-query attention repeats K/V heads with
RESHAPE (insert a unit axis) -> BROADCAST_TO -> RESHAPE through rank-5 tensors such as (1, 4, 1, 100, 4); with
the leading 1 dropped the same values have a rank-4 shape, and those reshapes and the broadcast run on the GPU.
Only tensors that nothing but RESHAPE / BROADCAST_TO reads or writes, whose shape operands are constants, and
that are no graph input or output are changed (the shape operands are replaced to match).
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph
from .graph_utils import new_const

_VIEW_OPS = ("RESHAPE", "BROADCAST_TO")


def drop_leading_units(graph: Graph) -> Graph:
    producers, consumers = graph.producers(), graph.consumers()
    boundary = set(graph.inputs) | set(graph.outputs)
    targets = []
    for t, tensor in enumerate(graph.tensors):
        shape = tuple(tensor.shape)
        if tensor.data is not None or len(shape) <= 4 or any(d != 1 for d in shape[:len(shape) - 4]) \
                or t in boundary or t not in producers:
            continue
        writer = graph.ops[producers[t]]
        readers = [graph.ops[i] for i in consumers.get(t, [])]
        if writer.code not in _VIEW_OPS or any(r.code not in _VIEW_OPS or r.inputs.index(t) != 0 for r in readers):
            continue
        if len(writer.inputs) > 1 and (writer.inputs[1] < 0 or graph.tensors[writer.inputs[1]].data is None):
            continue
        targets.append(t)
    if not targets:
        return graph
    out = graph.copy()
    producers = out.producers()
    for t in targets:
        tensor = out.tensors[t]
        new_shape = tuple(tensor.shape)[len(tensor.shape) - 4:]
        sig = tensor.shape_signature
        tensor.shape = new_shape
        tensor.shape_signature = tuple(sig)[len(sig) - 4:] if sig is not None else None
        writer = out.ops[producers[t]]
        if len(writer.inputs) > 1:
            writer.inputs[1] = new_const(out, writer.inputs[1], np.array(new_shape, np.int32),
                                         f"{out.tensors[writer.inputs[1]].name}/rank4")
        if writer.code == "RESHAPE" and writer.options is not None and "new_shape" in writer.options.fields:
            writer.options = type(writer.options)(writer.options.kind,
                                                  {**writer.options.fields, "new_shape": list(new_shape)})
    return out
