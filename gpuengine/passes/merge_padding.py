"""Merge a zero, spatial-only PAD into the following VALID conv as explicit padding (one dispatch and one
tensor fewer). Only when the GPU kernel accepts the merged op: an explicit-padding op must never reach the
CPU fallback, whose schema has no such field."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..kernels import registry
from ..model.ir import Graph
from .graph_utils import const, sole_consumer

TARGETS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def merge_padding(graph: Graph) -> Graph:
    graph = graph.copy()
    for pad in list(graph.ops):
        if pad.code not in ("PAD", "PADV2") or len(graph.tensors[pad.inputs[0]].shape) != 4:
            continue
        pads = const(graph, pad.inputs[1])
        if pads is None or pads.shape != (4, 2) or np.any(pads[[0, 3]]) or np.any(pads < 0):
            continue
        if pad.code == "PADV2" and (len(pad.inputs) < 3 or const(graph, pad.inputs[2]) is None
                                    or np.any(const(graph, pad.inputs[2]))):
            continue
        conv = sole_consumer(graph, pad.outputs[0])
        if conv is None or conv.code not in TARGETS or conv.inputs[0] != pad.outputs[0]:
            continue
        if conv.opt("padding", 1) != 1 or conv.opt("explicit_padding") is not None:  # 1 = VALID
            continue
        (top, bottom), (left, right) = pads[1].tolist(), pads[2].tolist()
        merged = dataclasses.replace(conv, inputs=[pad.inputs[0], *conv.inputs[1:]], options=dataclasses.replace(
            conv.options, fields={**conv.options.fields, "explicit_padding": (top, bottom, left, right)}))
        if registry.check(merged, graph) is not None:
            continue
        conv.inputs, conv.options = merged.inputs, merged.options
        graph.ops = [o for o in graph.ops if o is not pad]
    return graph
