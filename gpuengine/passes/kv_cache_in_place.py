"""A KV cache written in place: DYNAMIC_UPDATE_SLICE(cache, rows, offsets) -> KV_CACHE_WRITE
(lowering/kernels/kv_cache.py).

When the cache is a graph input read by nothing else, the result is a graph output (the signature hands the cache
back), and every op reading the result is an ATTENTION op reading it as K or V through a layout view (after
fold_attention_operands), the runtime can hold input and output in one BHWC buffer: the write touches only the
new rows, no step copies or converts the cache, and feeding the output back as the next step's input
(`set_input_buffer(name, output_buffer(name))`) binds the same buffer. The attention views get a first step from
the cache's flat storage shape [rows, C] (PHWC4 = BHWC bytes when C % 4 == 0), so they read those bytes as they
are. Anything else keeps its DYNAMIC_UPDATE_SLICE (a copy of the cache, as before).

The update is read through a layout view too (the RESHAPE / SLICE / TRANSPOSE ops in front of it: V sliced from a
fused QKV projection's output), and a ROPE op (passes/fuse_rope.py) producing it for this write alone joins the
write when its tables are the same for every row (a decode step's): the key rows are rotated as they are stored.
Two writes (a layer's K and V, with the same offsets or each its own) then become one dispatch, and the ROPE of the
query that the same layer's attention reads joins it too: from the QKV projection's output to the attention, one
dispatch.
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op, Options
from ..model.ops import ATTENTION, GROUPS, KV_CACHE_WRITE, QUERY, ROPE, ROPE_TABLES, VIEW_UPDATE, VIEW_X, flat_shape
from ..model.ops import ATTENTION_VIEWS as VIEWS
from ..model.ops import ViewStep as Step
from . import kernel_support
from .fold_matmul_layout import _step
from .fuse_rope import _slice_step, drop_unread_views
from .graph_utils import with_fields

MAX_STEPS = 8


def kv_cache_in_place(graph: Graph) -> Graph:
    graph = graph.copy()
    readers = graph.consumers()
    for i, op in enumerate(graph.ops):
        if op.code != "DYNAMIC_UPDATE_SLICE":
            continue
        found = _rewrite(graph, i, op, readers)
        if found is not None:  # K and V feed one ATTENTION: each rewrite starts from the last one's
            graph.ops = [found.get(j, o) for j, o in enumerate(graph.ops)]
    graph.ops = [o for o in graph.ops if o.code != "_GONE"]
    return _join_queries(_pair_writes(drop_unread_views(graph)))


def _groups(op: Op) -> tuple:
    return op.opt(GROUPS) or ((len(op.inputs), op.opt(VIEW_UPDATE), bool(op.opt(ROPE_TABLES))),)


def _join_queries(graph: Graph) -> Graph:
    """Each cache write joined by the ROPE whose output only the attention reading its caches reads: one before the
    write, or one after it (the zoo's decoders rotate the query there) whose inputs are all there at the write."""
    readers = graph.consumers()
    for w in [o for o in graph.ops if o.code == KV_CACHE_WRITE]:
        at = graph.ops.index(w)
        attention = {j for t in w.outputs for j in readers.get(t, [])}
        made_at = {t: j for j, o in enumerate(graph.ops) for t in o.outputs}
        for r in graph.ops[:min(attention, default=at)]:
            if r.code != ROPE or r.outputs[0] in graph.outputs:
                continue
            users = readers.get(r.outputs[0], [])
            if not users or not set(users) <= attention or min(users) <= at:
                continue
            if any(made_at.get(t, -1) >= at for t in r.inputs):  # an input made at or after the write
                continue
            merged = Op(index=w.index, code=KV_CACHE_WRITE, inputs=[*w.inputs, *r.inputs],
                        outputs=[*w.outputs, *r.outputs], options=Options("KvCacheWriteOptions", {
                            GROUPS: (*_groups(w), (len(r.inputs), r.opt(VIEW_X), True, QUERY)),
                            "source_ops": (*(w.opt("source_ops") or ()), ROPE)}))
            if kernel_support.check(merged, graph) is None:
                graph.ops = [merged if o is w else o for o in graph.ops if o is not r]
                readers = graph.consumers()
                break
    return graph


def _pair_writes(graph: Graph) -> Graph:
    """Each write joined by the next one (a layer's K and V: same offsets, or each its own as litert-torch's
    transposed caches have, K written as a row and V as a column), when nothing between them reads its cache."""
    i = 0
    while i < len(graph.ops):
        a = graph.ops[i]
        if a.code == KV_CACHE_WRITE and not a.opt(GROUPS):
            for j in range(i + 1, len(graph.ops)):
                b = graph.ops[j]
                if a.outputs[0] in b.inputs:
                    break
                if b.code != KV_CACHE_WRITE or b.opt(GROUPS):
                    continue
                groups = tuple((len(w.inputs), w.opt(VIEW_UPDATE), bool(w.opt(ROPE_TABLES))) for w in (a, b))
                merged = Op(index=b.index, code=KV_CACHE_WRITE, inputs=[*a.inputs, *b.inputs],
                            outputs=[*a.outputs, *b.outputs], options=Options("KvCacheWriteOptions", {
                                GROUPS: groups, "source_ops": ("DYNAMIC_UPDATE_SLICE", "DYNAMIC_UPDATE_SLICE")}))
                if kernel_support.check(merged, graph) is None:
                    graph.ops = [merged if o is b else o for o in graph.ops if o is not a]
                    i -= 1
                break
        i += 1
    return graph


def _rewrite(graph: Graph, i: int, op: Op, readers: dict[int, list[int]]) -> dict[int, Op] | None:
    if len(op.inputs) != 3 or len(op.outputs) != 1 or min(op.inputs) < 0:
        return None
    cache, out = op.inputs[0], op.outputs[0]
    tensor = graph.tensors[cache]
    if cache not in graph.inputs or cache in graph.outputs or out not in graph.outputs or out in graph.inputs:
        return None
    if readers.get(cache, []) != [i] or tensor.dtype != np.float32 or tensor.quantization is not None:
        return None
    shape = tuple(tensor.shape)
    if not shape or shape[-1] % 4 or len(shape) > 4:
        return None
    write = Op(index=op.index, code=KV_CACHE_WRITE, inputs=list(op.inputs), outputs=[out],
               options=Options("KvCacheWriteOptions", {"source_ops": ("DYNAMIC_UPDATE_SLICE",)}))
    if kernel_support.check(write, graph) is not None:
        return None
    write, absorbed = _read_update(graph, write)
    first = Step("RESHAPE", flat_shape(shape), shape)
    result = {i: write, **{graph.ops.index(o): Op(index=o.index, code="_GONE", inputs=[], outputs=[])
                           for o in absorbed}}
    for j in readers.get(out, []):
        reader = graph.ops[j]
        if reader.code != ATTENTION or reader.inputs[0] == out or (len(reader.inputs) > 3 and reader.inputs[3] == out):
            return None
        fields = {}
        for position in (1, 2):
            if reader.inputs[position] == out:
                fields[VIEWS[position]] = (first, *(reader.opt(VIEWS[position]) or ()))
        candidate = with_fields(reader, **fields)
        if kernel_support.check(candidate, graph) is not None:
            return None
        result[j] = candidate
    return result


def _read_update(graph: Graph, write: Op) -> tuple[Op, list[Op]]:
    """The write reading its update through the layout ops (and a ROPE) in front of it, when the kernel takes it;
    and the ROPE op it absorbed (at most one, removed by the caller; layout ops go when nothing reads them)."""
    producers, readers = graph.producers(), graph.consumers()
    t = write.inputs[1]
    steps: tuple[Step, ...] = ()
    rope: Op | None = None
    while len(steps) < MAX_STEPS and t in producers and t not in graph.outputs:
        op = graph.ops[producers[t]]
        step = _step(graph, op) or _slice_step(graph, op)
        if step is not None and len(step.in_shape) <= 4 and len(step.out_shape) <= 4:
            steps, t = (step, *steps), op.inputs[0]
            continue
        if op.code == ROPE and rope is None and len(readers.get(t, [])) == 1 and _keeps_rows(steps):
            rope, steps, t = op, (*(op.opt(VIEW_X) or ()), *steps), op.inputs[0]
            continue
        break
    if not steps and rope is None:
        return write, []
    inputs = [write.inputs[0], t, write.inputs[2], *(rope.inputs[1:] if rope else [])]
    candidate = with_fields(write, inputs, **{VIEW_UPDATE: steps or None, ROPE_TABLES: rope is not None})
    if kernel_support.check(candidate, graph) is None:
        return candidate, [rope] if rope else []
    return write, []


def _keeps_rows(steps: tuple[Step, ...]) -> bool:
    """Each step moves whole rows of the last axis (a rotation of the rows commutes with it)."""
    for step in steps:
        if step.in_shape[-1] != step.out_shape[-1]:
            return False
        if step.kind == "TRANSPOSE" and step.perm[-1] != len(step.in_shape) - 1:
            return False
        if step.kind == "SLICE" and step.perm[-1] != 0:
            return False
    return True
