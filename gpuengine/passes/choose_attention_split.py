"""Flash-decoding or one dispatch, decided by the latency model.

An ATTENTION of few queries over many keys (a decode step) is lowered as flash-decoding: its keys cut into chunks
over many workgroups, the last of a row to finish merging their softmax states (lowering/kernels/attention.py),
which fills a big GPU when the cache is long. For a short cache the merge can cost more than it saves: given
the description of the device the plan is for, this pass predicts both lowerings of each such op and marks it
ONE_DISPATCH (keys split within one workgroup per row) where one dispatch is predicted faster. Without a
description it changes nothing. A remark (shown by `gpuengine inspect`) says which way each shape went and why.
"""

from __future__ import annotations

from ..latency.latency import Device
from ..model.ir import Graph
from ..model.ops import ATTENTION, ONE_DISPATCH
from . import kernel_support
from .fuse_norm_into_projection import shape_key
from .graph_utils import with_fields


def choose_attention_split(graph: Graph, device: Device | None = None) -> Graph:
    """`device`: the description of the device the plan is for (None: flash-decoding wherever the kernel uses it)."""
    if device is None:
        return graph
    original, graph = graph, graph.copy()
    answers: dict[tuple, tuple[float, int, float, int]] = {}  # shape key -> (ns, dispatches) as is, then one
    remarks: dict[tuple, list] = {}
    changed = False
    for i, op in enumerate(graph.ops):
        if op.code != ATTENTION or op.opt(ONE_DISPATCH):
            continue
        single = with_fields(op, **{ONE_DISPATCH: True})
        if kernel_support.check(single, graph) is not None:
            continue
        key = shape_key(op, graph)
        if key not in answers:
            answers[key] = (*kernel_support.op_ns(op, graph, device), *kernel_support.op_ns(single, graph, device))
        split_ns, _, one_ns, _ = answers[key]
        if split_ns == one_ns:  # the same lowering either way: not flash-decoding
            continue
        remarks.setdefault(key, [0, split_ns, one_ns])[0] += 1
        if one_ns < split_ns:
            graph.ops[i] = single
            changed = True
    graph.remarks.extend(
        f"ATTENTION ({n}x): {'one workgroup a row' if one < split else 'flash-decoding (key chunks)'}: predicted "
        f"{one / 1e3:.1f} us in one workgroup a row vs {split / 1e3:.1f} us as flash-decoding on {device.name} "
        "(latency model)" for n, split, one in remarks.values())
    return graph if changed or remarks else original
