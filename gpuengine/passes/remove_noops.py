"""Drop ops that compute nothing: same-shape RESHAPE, single-input ADD/CONCATENATION, scale-1 RESIZE,
identity SLICE/STRIDED_SLICE/PAD/TRANSPOSE, CAST to the same type."""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op
from .graph_utils import bypass, const, same_grid


def _is_noop(graph: Graph, op: Op) -> bool:
    ins = [t for t in op.inputs if t >= 0]
    if not ins or len(op.outputs) != 1:
        return False
    src, out = graph.tensors[ins[0]], graph.tensors[op.outputs[0]]
    if src.data is not None or src.shape != out.shape or src.dtype != out.dtype:
        return False
    if not same_grid(graph, ins[0], op.outputs[0]):  # a requantizing op changes the values
        return False
    code = op.code
    if code in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST"):
        return True
    if code in ("ADD", "CONCATENATION") and len(ins) == 1:
        return int(op.opt("fused_activation_function", 0) or 0) == 0
    if code in ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"):
        return True  # same in/out size: every sampling convention maps pixel i to i
    if code in ("PAD", "PADV2", "MIRROR_PAD"):
        pads = const(graph, op.inputs[1])
        return pads is not None and not np.any(pads)
    if code == "TRANSPOSE":
        perm = const(graph, op.inputs[1])
        return perm is not None and list(perm.reshape(-1)) == list(range(len(src.shape)))
    if code in ("SLICE", "STRIDED_SLICE"):
        if code == "STRIDED_SLICE" and (op.opt("shrink_axis_mask", 0) or op.opt("new_axis_mask", 0)):
            return False
        if code == "SLICE":
            return True  # same shape: everything kept
        # Same shape with unit steps: everything kept. Strides known only at run time may reverse an axis.
        strides = const(graph, op.inputs[3]) if len(op.inputs) > 3 else None
        return strides is not None and bool(np.all(strides == 1))
    return False


def remove_noops(graph: Graph) -> Graph:
    graph = graph.copy()
    for op in list(graph.ops):
        if _is_noop(graph, op):
            bypass(graph, op)
    return graph
