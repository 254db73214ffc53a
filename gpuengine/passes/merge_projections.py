"""Merge FULLY_CONNECTED ops that read the same tensor and feed matmuls into one FULLY_CONNECTED (one dispatch).

Attention projects one input three times (Q, K, V: three FULLY_CONNECTED ops of the same input). When each
projection's output is read only by an ATTENTION or BATCH_MATMUL op (through its layout view or directly), the
weights are stacked into one [sum O_i, I] matrix, the merged op writes [..., sum O_i], and each reader reads its
part through a SLICE step prepended to its view (lowering/kernels/layout_view.py): no slice is ever copied. Only
projections with the same activation and output row shape and O_i a multiple of 4 (parts start on whole vec4
slices) merge; the merge happens only when the kernels accept every rewritten op.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.ir import Graph, Op
from ..model.ops import ATTENTION, ATTENTION_VIEWS, MATMUL_VIEWS
from ..model.ops import ViewStep as Step
from . import kernel_support
from .graph_utils import new_const, with_fields

_VIEWS = {ATTENTION: ATTENTION_VIEWS, "BATCH_MATMUL": MATMUL_VIEWS}


def merge_projections(graph: Graph) -> Graph:
    graph = graph.copy()
    merged = True
    while merged:  # a merge moves op indices: look again from the start
        merged = False
        readers = graph.consumers()
        groups: dict[tuple, list[int]] = {}
        for i, op in enumerate(graph.ops):
            key = _projection_key(graph, op, readers)
            if key is not None:
                groups.setdefault(key, []).append(i)
        for members in groups.values():
            if len(members) > 1 and _merge(graph, members, readers):
                merged = True
                break
    return graph


def _projection_key(graph: Graph, op: Op, readers: dict[int, list[int]]) -> tuple | None:
    """What must agree for projections to merge (input, activation, row shape), or None for no candidate."""
    if op.code != "FULLY_CONNECTED" or len(op.inputs) < 2 or len(op.outputs) != 1:
        return None
    x, w = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else -1
    out = op.outputs[0]
    tensors = graph.tensors
    if x < 0 or tensors[x].data is not None or tensors[w].data is None or len(tensors[w].shape) != 2:
        return None
    if any(tensors[t].dtype != np.float32 or tensors[t].quantization is not None for t in (x, w, out)):
        return None
    if bias >= 0 and (tensors[bias].data is None or tensors[bias].dtype != np.float32):
        return None
    o = tensors[w].shape[0]
    if o % 4 or tuple(tensors[out].shape[-1:]) != (o,) or out in graph.outputs or len(readers.get(out, [])) != 1:
        return None
    reader = graph.ops[readers[out][0]]
    if reader.code not in _VIEWS or reader.inputs.count(out) != 1 or reader.inputs.index(out) >= len(
            _VIEWS[reader.code]):
        return None
    return (x, int(op.opt("fused_activation_function", 0) or 0), bool(op.opt("keep_num_dims", False)),
            tuple(tensors[out].shape[:-1]), tensors[w].shape[1])


def _merge(graph: Graph, members: list[int], readers: dict[int, list[int]]) -> bool:
    ops = [graph.ops[i] for i in members]
    weights = [np.asarray(graph.tensors[op.inputs[1]].data, np.float32) for op in ops]
    biases = [np.asarray(graph.tensors[op.inputs[2]].data, np.float32).reshape(-1)
              if len(op.inputs) > 2 and op.inputs[2] >= 0 else np.zeros(w.shape[0], np.float32)
              for op, w in zip(ops, weights)]
    first_out = graph.tensors[ops[0].outputs[0]]
    total = sum(w.shape[0] for w in weights)
    merged_shape = (*first_out.shape[:-1], total)
    tensors_before, ops_before = len(graph.tensors), list(graph.ops)
    merged_t = len(graph.tensors)
    graph.tensors.append(dataclasses.replace(first_out, index=merged_t, name=f"{first_out.name}/merged",
                                             shape=merged_shape, shape_signature=None))
    w_t = new_const(graph, ops[0].inputs[1], np.concatenate(weights, 0), f"{first_out.name}/merged_weights")
    b_t = new_const(graph, ops[0].inputs[1], np.concatenate(biases), f"{first_out.name}/merged_bias")
    merged = dataclasses.replace(ops[0], inputs=[ops[0].inputs[0], w_t, b_t], outputs=[merged_t])
    rewritten: dict[int, Op] = {}
    offset = 0
    for op, w in zip(ops, weights):
        out = op.outputs[0]
        r = readers[out][0]
        reader = rewritten.get(r, graph.ops[r])
        position = reader.inputs.index(out)
        key = _VIEWS[reader.code][position]
        shape = tuple(graph.tensors[out].shape)
        begin = (0,) * (len(shape) - 1) + (offset,)
        steps = (Step("SLICE", merged_shape, shape, begin), *(reader.opt(key) or ()))
        inputs = list(reader.inputs)
        inputs[position] = merged_t
        rewritten[r] = with_fields(reader, inputs, **{key: steps})
        offset += w.shape[0]
    checks = [kernel_support.check(merged, graph)] + [kernel_support.check(op, graph) for op in rewritten.values()]
    if any(reason is not None for reason in checks):
        del graph.tensors[tensors_before:]
        graph.ops = ops_before
        return False
    gone = set(members[1:])
    new_ops = []
    for i, op in enumerate(graph.ops):
        if i in gone:
            continue
        new_ops.append(merged if i == members[0] else rewritten.get(i, op))
    graph.ops = new_ops
    return True
