"""An RMSNorm read only by one projection becomes that projection's prologue (one dispatch instead of two).

A pre-norm transformer normalizes the residual stream, then projects it (Q/K/V, or the gate and up of the MLP): the
RMS_NORM op (passes/fuse_normalization.py) writes a row only one FULLY_CONNECTED reads. The FC (int8 weights,
which reads its whole input row anyway to find the row's range before quantizing it, or float weights) computes the
row's normalizer in one more pass over the row and normalizes each value as it reads it, with RMS_NORM's own
expression (lowering/kernels/fully_connected.py, option `norm`; f32 sums in fp16 mode too); the normalized row is never
written. Merged projections (Q/K/V, gated gate/up) take it alike.

Only when the RMS_NORM's output is read by that one FC alone (not a graph output), the FC's rows are single
pixels of the normalized axis, and the kernel accepts the rewritten op (float input and output rows).

The fusion trades a dispatch for recomputation: every invocation of the FC recomputes its row's normalizer (one
more pass over the row) where one RMS_NORM dispatch would write the row once. A GPU saves a dependent dispatch
(about 2.2 us on an H100); a CPU adapter (lavapipe) with narrow tiles loses more to the extra passes. So, given
the latency model's description of the device the plan is for (latency/latency.py), the pass fuses only where the
FC with the prologue is predicted faster than the RMS_NORM dispatch and the plain FC, each in its fastest
decomposition, with their fixed cost per dispatch; a remark says which way it went. Without a description it fuses.
"""

from __future__ import annotations

import numpy as np

from ..latency.latency import Device
from ..model.ir import Graph, Op
from ..model.ops import EPS_OUTSIDE, EPSILON, NORM, RMS_NORM, SOURCE_OPS
from . import kernel_support
from .graph_utils import with_fields


def fuse_norm_into_projection(graph: Graph, device: Device | None = None) -> Graph:
    """`device`: the description of the device the plan is for (None: fuse wherever the kernel can)."""
    graph = graph.copy()
    weighing = FusedOrApart(device) if device is not None else None
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
        if kernel_support.check(fused, graph) is not None:
            continue
        if weighing is not None and not weighing.faster(fused, [norm, op], graph):
            continue
        graph.ops[i] = fused
        gone.add(k)
    graph.ops = [op for k, op in enumerate(graph.ops) if k not in gone]
    if weighing is not None:
        graph.remarks.extend(weighing.remarks(RMS_NORM, "the FULLY_CONNECTED reading it"))
    return graph


def shape_key(op: Op, graph: Graph) -> tuple:
    """What the latency model's prediction for `op` depends on: its code, options and the shape, type and
    quantization layout of every tensor it reads or writes, with tensor indices in its options replaced by the same
    (weights' values and tensor names left out, so the ops of identical layers share one key)."""
    def tensor(t: int) -> tuple:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < len(graph.tensors):
            return ("?", t)
        x = graph.tensors[t]
        q = x.quantization
        return (tuple(x.shape), str(x.dtype), x.type_code, x.data is None,
                None if q is None else (q.scale.size, q.zero_point.size, q.axis))

    def value(v: object, indices: bool) -> object:
        if isinstance(v, (list, tuple)):
            return tuple(value(e, indices) for e in v)
        if isinstance(v, np.ndarray):
            return (v.shape, v.tobytes())
        return tensor(v) if indices and isinstance(v, int) and not isinstance(v, bool) else v

    options = op.options.fields if op.options is not None else {}
    return (op.code, tuple(tensor(t) if t >= 0 else None for t in op.inputs), tuple(tensor(t) for t in op.outputs),
            tuple((k, value(v, k == NORM)) for k, v in sorted(options.items())))


class FusedOrApart:
    """The latency model's answer to "is this fusion faster than its ops apart?" (each in its fastest decomposition,
    with its dispatch's fixed cost), asked once per shape -- identical layers ask the same question, and building a
    kernel packs its weights -- and tallied for the pass's remarks."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.answers: dict[tuple, tuple[float, float]] = {}  # shape keys -> predicted ns (fused, apart)
        self.tally = {True: [0, 0.0, 0.0], False: [0, 0.0, 0.0]}  # fused or not: [count, ns fused, ns apart]

    def faster(self, fused: Op, parts: list[Op], graph: Graph, *context: object) -> bool:
        """Whether `fused` is predicted faster than `parts` as dispatches of their own (`context`: whatever else
        the fused kernel's cost depends on, part of the key)."""
        key = (shape_key(fused, graph), *(shape_key(part, graph) for part in parts), *context)
        if key not in self.answers:
            ns = kernel_support.op_ns
            self.answers[key] = (ns(fused, graph, self.device)[0],
                                 sum(ns(part, graph, self.device)[0] for part in parts))
        fused_ns, apart_ns = self.answers[key]
        entry = self.tally[fused_ns < apart_ns]
        entry[0], entry[1], entry[2] = entry[0] + 1, entry[1] + fused_ns, entry[2] + apart_ns
        return fused_ns < apart_ns

    def remarks(self, what: str, consumer: str) -> list[str]:
        """What the pass decided and why, per decision: `what` fused into or kept apart from `consumer`."""
        return [f"{what} {'fused into' if fused_it else 'kept apart from'} {consumer} ({n}x): predicted "
                f"{fused_ns / 1e3:.1f} us fused vs {apart_ns / 1e3:.1f} us as two dispatches on {self.device.name} "
                "(latency model)" for fused_it, (n, fused_ns, apart_ns) in self.tally.items() if n]
