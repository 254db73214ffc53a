"""Merge a zero, spatial-only PAD into the VALID convs that read it as explicit padding (one dispatch and
one tensor fewer); every reader must accept it, since the PAD then disappears. Only when the GPU kernel
accepts the merged op: an explicit-padding op must never reach the CPU fallback, whose schema has no such
field."""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph
from . import kernel_support
from .graph_utils import const, consumers, same_grid, with_fields

TARGETS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def merge_padding(graph: Graph) -> Graph:
    graph = graph.copy()
    for pad in list(graph.ops):
        if pad.code not in ("PAD", "PADV2") or len(graph.tensors[pad.inputs[0]].shape) != 4 \
                or not same_grid(graph, pad.inputs[0], pad.outputs[0]):
            continue
        pads = const(graph, pad.inputs[1])
        if pads is None or pads.shape != (4, 2) or np.any(pads[[0, 3]]) or np.any(pads < 0):
            continue
        if pad.code == "PADV2" and (len(pad.inputs) < 3 or const(graph, pad.inputs[2]) is None
                                    or np.any(const(graph, pad.inputs[2]))):
            continue
        readers = consumers(graph, pad.outputs[0])
        # Only VALID (1) convs; a missing padding field means SAME (0), as in TFLite.
        if not readers or pad.outputs[0] in graph.outputs or any(
                c.code not in TARGETS or c.inputs[0] != pad.outputs[0] or pad.outputs[0] in c.inputs[1:]
                or c.opt("padding", 0) != 1 or c.opt("explicit_padding") is not None for c in readers):
            continue
        (top, bottom), (left, right) = pads[1].tolist(), pads[2].tolist()
        merged = [with_fields(c, [pad.inputs[0], *c.inputs[1:]], explicit_padding=(top, bottom, left, right))
                  for c in readers]
        if any(kernel_support.check(m, graph) is not None for m in merged):
            continue
        for c, m in zip(readers, merged):
            c.inputs, c.options = m.inputs, m.options
        graph.ops = [o for o in graph.ops if o is not pad]
    return graph
