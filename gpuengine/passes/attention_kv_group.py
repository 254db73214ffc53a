"""Grouped-query attention without copies: an ATTENTION op (passes/fuse_attention.py) whose K and V are each the
model's K/V heads repeated `group` times, [..., Hkv, N, D] -> RESHAPE [..., Hkv, 1, N, D] -> BROADCAST_TO
[..., Hkv, G, N, D] -> RESHAPE [..., Hkv * G, N, D] (the last RESHAPE possibly already folded into the op's operand
view by passes/fold_matmul_layout.py), reads the K/V heads directly: option kv_group = G, so query head h reads
K/V head h // G (lowering/kernels/attention.py); a single K/V head repeated (BROADCAST_TO alone) is read through the
kernel's batch broadcasting. The broadcast copies are dropped when nothing else reads them.

Runs after fuse_attention; ATTENTION ops whose operands were already folded otherwise keep them (nothing matches).
"""

from __future__ import annotations

from ..model.ir import Graph, Op, Options
from ..model.ops import ATTENTION, KV_GROUP
from . import kernel_support


def attention_kv_group(graph: Graph) -> Graph:
    graph = graph.copy()
    changed = False
    for i, op in enumerate(graph.ops):
        if op.code != ATTENTION or op.opt(KV_GROUP):
            continue
        found = [_repeated_heads(graph, op.inputs[p], op.opt(view)) for p, view in ((1, "view_k"), (2, "view_v"))]
        if None in found or found[0][1] != found[1][1]:  # type: ignore[index]
            continue
        (k, group), (v, _) = found  # type: ignore[misc]
        fields = {**op.options.fields, "view_k": None, "view_v": None}
        if group > 1:
            fields[KV_GROUP] = group
        candidate = Op(index=op.index, code=op.code, inputs=[op.inputs[0], k, v, *op.inputs[3:]],
                       outputs=list(op.outputs), options=Options(op.options.kind, fields))
        if kernel_support.check(candidate, graph) is not None:
            continue
        graph.ops[i] = candidate
        changed = True
    return _drop_unread(graph) if changed else graph


def _repeated_heads(graph: Graph, t: int, view: tuple | None) -> tuple[int, int] | None:
    """(the K/V heads tensor, G) when t (read through `view`) is it with each head repeated G times in a row."""
    producers = graph.producers()
    if view:
        if len(view) != 1 or view[0].kind != "RESHAPE":
            return None
        merged = tuple(view[0].out_shape)
        repeated = tuple(view[0].in_shape)
        broadcast = t
    else:
        reshape = graph.ops[producers[t]] if t in producers else None
        if reshape is not None and reshape.code == "BROADCAST_TO":  # one K/V head: the kernel broadcasts it
            source = reshape.inputs[0]
            shape, wanted = tuple(graph.tensors[source].shape), tuple(graph.tensors[t].shape)
            if len(shape) == len(wanted) and shape[-2:] == wanted[-2:] and all(
                    a in (1, b) for a, b in zip(shape, wanted)):
                return source, 1
            return None
        if reshape is None or reshape.code != "RESHAPE":
            return None
        merged, broadcast = tuple(graph.tensors[t].shape), reshape.inputs[0]
        repeated = tuple(graph.tensors[broadcast].shape)
    copy = graph.ops[producers[broadcast]] if broadcast in producers else None
    repeated, merged = _strip(repeated), _strip(merged)  # converters and drop_leading_units move leading 1s
    if copy is None or copy.code != "BROADCAST_TO" or len(repeated) < 4 or len(repeated) < len(merged) + 1:
        return None
    hkv, group = repeated[-4], repeated[-3]
    if _strip(repeated[:-4]) != _strip(merged[:-3]) or merged[-3] != hkv * group or repeated[-2:] != merged[-2:] \
            or group < 2:
        return None
    source = copy.inputs[0]
    if _strip(graph.tensors[source].shape) != _strip((*repeated[:-3], 1, *repeated[-2:])):
        return None
    unsqueeze = graph.ops[producers[source]] if source in producers else None
    if unsqueeze is not None and unsqueeze.code == "RESHAPE":
        heads = unsqueeze.inputs[0]
        if _strip(graph.tensors[heads].shape) == _strip((*repeated[:-3], *repeated[-2:])):
            return heads, group
    return None


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape = shape[1:]
    return shape


def _drop_unread(graph: Graph) -> Graph:
    """Drop RESHAPE / BROADCAST_TO ops nothing reads any more (the repeated copies of K and V)."""
    while True:
        readers = graph.consumers()
        dead = [i for i, op in enumerate(graph.ops) if op.code in ("RESHAPE", "BROADCAST_TO")
                and all(t not in readers and t not in graph.outputs for t in op.outputs)]
        if not dead:
            return graph
        graph.ops = [op for i, op in enumerate(graph.ops) if i not in dead]
