"""An RMSNorm read only by one projection becomes that projection's prologue (one dispatch instead of two).

A pre-norm transformer normalizes the residual stream, then projects it (Q/K/V, or the gate and up of the MLP): the
RMS_NORM op (passes/fuse_normalization.py) writes a row only one FULLY_CONNECTED reads. A hybrid FC
(int8 weights) reads its whole input row anyway, to find the row's range before quantizing it, so it computes the
row's normalizer in one more pass over the row and normalizes each value as it reads it, with RMS_NORM's own
expression (kernels/fully_connected.py, option `norm`); the normalized row is never written.

Only when the RMS_NORM's output is read by that one FC alone (not a graph output), the FC's rows are single
pixels of the normalized axis, and the kernel accepts the rewritten op (today: int8 weights).
"""

from __future__ import annotations

from ..kernels import registry
from ..kernels.fully_connected import NORM
from ..kernels.normalization import EPS_OUTSIDE, EPSILON, RMS_NORM, SOURCE_OPS
from ..model.ir import Graph
from .graph_utils import with_fields


def fuse_norm_into_projection(graph: Graph) -> Graph:
    graph = graph.copy()
    readers = graph.consumers()
    producers = {t: k for k, op in enumerate(graph.ops) for t in op.outputs}
    gone: set[int] = set()
    for i, op in enumerate(graph.ops):
        if op.code != "FULLY_CONNECTED" or op.opt(NORM) or not op.inputs or op.inputs[0] < 0:
            continue
        y = op.inputs[0]
        k = producers.get(y)
        if k is None or k in gone or readers.get(y, []) != [i] or y in graph.outputs:
            continue
        norm = graph.ops[k]
        if norm.code != RMS_NORM or len(norm.inputs) != 3:
            continue
        x, scale, offset = norm.inputs
        label = f"{RMS_NORM}({'+'.join(norm.opt(SOURCE_OPS) or ())})"
        fused = with_fields(op, [x, *op.inputs[1:]], **{NORM: (scale, offset, float(norm.opt(EPSILON)),
                                                                bool(norm.opt(EPS_OUTSIDE)), label)})
        if registry.check(fused, graph) is not None:
            continue
        graph.ops[i] = fused
        gone.add(k)
    graph.ops = [op for k, op in enumerate(graph.ops) if k not in gone]
    return graph
