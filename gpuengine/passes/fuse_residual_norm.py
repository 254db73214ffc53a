"""A post-norm and its residual ADD become the prologue of the normed projection reading the sum: Gemma's "sandwich"
norms without a dispatch of their own.

Gemma 3 normalizes the attention's and the MLP's output rows before adding them to the residual stream:
h = x + RMS_NORM(o), and h is then normalized again for the next projection (an RMSNorm prologue since
fuse_norm_into_projection). RMS_NORM(o) needs o's whole row, which no tile of the projection writing o holds, so the
norm kept a dispatch (with the ADD as its epilogue). Here the next projection computes it instead: its prologue makes
one more pass over o for o's normalizer, reads x + RMS_NORM(o) wherever it read h, and, where anything else reads h
(the next residual ADD), the tiles of its first output slice write h as they pass over it
(lowering/kernels/fully_connected.py, option RESIDUAL_NORM). Runs after fuse_norm_into_projection.

Every tile of the projection repeats o's pass; given the latency model's description of the device the plan is for,
the pass fuses only where the projection with the residual prologue is predicted faster than the norm's dispatch
and the projection as they were (the ADD rides in the norm's dispatch as its epilogue there); remarks say which way
it went. Without a description it fuses wherever the kernel can.
"""

from __future__ import annotations

from ..latency.latency import Device
from ..model.ir import Graph, Op
from ..model.ops import EPS_OUTSIDE, EPSILON, NORM, RESIDUAL_NORM, RMS_NORM, SOURCE_OPS
from . import kernel_support
from .fuse_norm_into_projection import FusedOrApart
from .graph_utils import with_fields


def fuse_residual_norm(graph: Graph, device: Device | None = None) -> Graph:
    """`device`: the description of the device the plan is for (None: fuse wherever the kernel can)."""
    original, graph = graph, graph.copy()
    readers = graph.consumers()
    producers = {t: k for k, op in enumerate(graph.ops) for t in op.outputs}
    weighing = FusedOrApart(device) if device is not None else None
    gone: set[int] = set()
    for i, op in enumerate(graph.ops):
        if op.code != "FULLY_CONNECTED" or not op.opt(NORM) or op.opt(RESIDUAL_NORM) or len(op.outputs) != 1:
            continue
        h = op.inputs[0]
        a = producers.get(h)
        if a is None or a in gone or graph.ops[a].code != "ADD" or len(graph.ops[a].inputs) != 2:
            continue
        add = graph.ops[a]
        if int(add.opt("fused_activation_function", 0) or 0):
            continue
        found = _post_norm(graph, add, producers, readers, gone)
        if found is None:
            continue
        n, x, norm = found
        o, scale, offset = norm.inputs
        if producers.get(x, -1) >= i or producers.get(o, -1) >= i:
            continue
        label = f"{RMS_NORM}({'+'.join(norm.opt(SOURCE_OPS) or ())})+ADD"
        if any(r < i for r in readers.get(h, []) if r != i):
            continue  # read before the projection, which would now make it
        others = [r for r in readers.get(h, []) if r != i] or h in graph.outputs
        bias = op.inputs[2] if len(op.inputs) > 2 else -1
        fused = with_fields(op, [x, op.inputs[1], bias, o], **{
            RESIDUAL_NORM: (3, scale, offset, float(norm.opt(EPSILON)), bool(norm.opt(EPS_OUTSIDE)), label)})
        fused.outputs = [op.outputs[0], h] if others else [op.outputs[0]]
        if kernel_support.check(fused, graph) is not None:
            continue
        if weighing is not None and not weighing.faster(fused, [norm, op], graph, bool(others)):
            continue
        graph.ops[i] = fused
        gone |= {a, producers[n]}
    tally = weighing.tally if weighing is not None else {}
    if not gone and not any(n for n, _, _ in tally.values()):
        return original
    graph.ops = [op for k, op in enumerate(graph.ops) if k not in gone]
    if weighing is not None:
        graph.remarks.extend(weighing.remarks("RMS_NORM + residual ADD", "the normed FULLY_CONNECTED reading the sum"))
    if device is None and gone:
        graph.remarks.append(f"RMS_NORM + residual ADD fused into the normed FULLY_CONNECTED reading the sum "
                             f"({len(gone) // 2}x)")
    return graph


def _post_norm(graph: Graph, add: Op, producers: dict[int, int], readers: dict[int, list[int]], gone: set[int],
               ) -> tuple[int, int, Op] | None:
    """(the normalized operand, the other operand x, the RMS_NORM) of a residual ADD x + RMS_NORM(o) whose norm's
    output only the ADD reads, both operands of one shape, o a run-time tensor."""
    for n, x in (add.inputs, add.inputs[::-1]):
        k = producers.get(n)
        if k is None or k in gone or graph.ops[k].code != RMS_NORM or len(graph.ops[k].inputs) != 3:
            continue
        if readers.get(n, []) != [graph.ops.index(add)] or n in graph.outputs or x == n:
            continue
        norm = graph.ops[k]
        shapes = {tuple(graph.tensors[t].shape) for t in (n, x, norm.inputs[0], add.outputs[0])}
        if len(shapes) == 1 and graph.tensors[x].data is None:
            return n, x, norm
    return None
