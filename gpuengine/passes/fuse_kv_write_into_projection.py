"""A decode step's KV cache write (with the rotated query beside it) becomes the epilogue of the projection
computing its rows: RMSNorm + QKV + RoPE + KV-cache write in one dispatch (lowering/kernels/kv_epilogue.py).

After kv_cache_in_place, a layer's K and V writes and the rotation of its query are one KV_CACHE_WRITE reading the
QKV projection's output through views; here, where that output is read by the write alone, the projection takes the
write as its option KV_EPILOGUE: its outputs become the write's (the caches, the rotated query) and its own output
is never stored. Runs after fuse_norm_into_projection, so the projection already holds its RMSNorm prologue and the
prediction weighs the dispatch as it will run.

The fusion trades a dispatch for work in the projection's store (the rotation's cos / sin per lane, scattered
stores) and for the projection's output rows laid out in pairs of slices (its tiles are then 2, 4 or 8 slices
wide). Given the latency model's description of the device the plan is for, the pass fuses only where the fused
projection is predicted faster than the projection and the write as two dispatches, with their fixed cost per
dispatch; remarks (shown by `gpuengine inspect`) say which way each shape went and, for writes that cannot fuse
(a query / key RMS norm, which needs the whole head's sum; offsets not from the position), why. Without a
description it fuses wherever the kernel can. A device binding too few storage buffers for the fused dispatch
runs the two dispatches as before (lowering/fusion.py, split to fit).
"""

from __future__ import annotations

from ..latency.latency import Device
from ..model.ir import Graph, Op, Options
from ..model.ops import GROUPS, KV_CACHE_WRITE, KV_EPILOGUE, QUERY
from . import kernel_support
from .fuse_norm_into_projection import FusedOrApart


def fuse_kv_write_into_projection(graph: Graph, device: Device | None = None) -> Graph:
    """`device`: the description of the device the plan is for (None: fuse wherever the kernel can)."""
    original, graph = graph, graph.copy()
    readers = graph.consumers()
    producers = {t: k for k, op in enumerate(graph.ops) for t in op.outputs}
    weighing = FusedOrApart(device) if device is not None else None
    kept: dict[str, int] = {}
    gone: set[int] = set()
    for w, write in enumerate(graph.ops):
        if write.code != KV_CACHE_WRITE:
            continue
        updates = set(_updates(write))
        if len(updates) != 1:
            kept["the write reads more than one tensor's rows"] = kept.get(
                "the write reads more than one tensor's rows", 0) + 1
            continue
        t = updates.pop()
        k = producers.get(t)
        if k is None or graph.ops[k].code != "FULLY_CONNECTED" or graph.ops[k].opt(KV_EPILOGUE) or \
                len(graph.ops[k].outputs) != 1:
            continue
        if set(readers.get(t, [])) != {w} or t in graph.outputs:
            continue
        fc = graph.ops[k]
        if any(producers.get(x, -1) >= k for x in write.inputs if x != t and x >= 0):
            continue  # an input of the write made after the projection
        fused = _joined(fc, write)
        reason = kernel_support.check(fused, graph)
        if reason is not None:
            kept[reason] = kept.get(reason, 0) + 1
            continue
        if weighing is not None and not weighing.faster(fused, [fc, write], graph):
            continue
        graph.ops[k] = fused
        gone.add(w)
    tally = weighing.tally if weighing is not None else {}
    if not gone and not kept and not tally.get(False, [0])[0]:
        return original
    graph.ops = [op for j, op in enumerate(graph.ops) if j not in gone]
    if weighing is not None:
        graph.remarks.extend(weighing.remarks(KV_CACHE_WRITE, "the FULLY_CONNECTED computing its rows"))
    if device is None and gone:
        graph.remarks.append(f"{KV_CACHE_WRITE} fused into the FULLY_CONNECTED computing its rows ({len(gone)}x)")
    graph.remarks.extend(f"{KV_CACHE_WRITE} kept as its own dispatch ({n}x): {reason}" for reason, n in kept.items())
    return graph


def _updates(write: Op) -> list[int]:
    """The tensors whose rows the write stores or rotates (each group's update, or a query's x)."""
    groups = write.opt(GROUPS) or ((len(write.inputs), None, False),)
    found, first = [], 0
    for count, _, _, *kind in groups:
        found.append(write.inputs[first] if kind == [QUERY] else write.inputs[first + 1])
        first += count
    return found


def _joined(fc: Op, write: Op) -> Op:
    """The projection carrying the write (kernels/kv_epilogue.py `joined`, written here: passes import no lowering)."""
    fields = tuple(sorted(write.options.fields.items()))
    rows = [-1 if t == fc.outputs[0] else t for t in write.inputs]  # never written: no input of the fused op
    return Op(index=fc.index, code=fc.code, inputs=[*fc.inputs, *rows], outputs=list(write.outputs),
              options=Options(fc.options.kind, {**fc.options.fields,
                                                KV_EPILOGUE: (fc.outputs[0], len(fc.inputs), fields)}))
