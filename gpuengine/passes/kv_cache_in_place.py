"""A KV cache written in place: DYNAMIC_UPDATE_SLICE(cache, rows, offsets) -> KV_CACHE_WRITE (kernels/kv_cache.py).

When the cache is a graph input read by nothing else, the result is a graph output (the signature hands the cache
back), and every op reading the result is an ATTENTION op reading it as K or V through a layout view (after
fold_attention_operands), the runtime can hold input and output in one BHWC buffer: the write touches only the
new rows, no step copies or converts the cache, and feeding the output back as the next step's input
(`set_input_buffer(name, output_buffer(name))`) binds the same buffer. The attention views get a first step from
the cache's flat storage shape [rows, C] (PHWC4 = BHWC bytes when C % 4 == 0), so they read those bytes as they
are. Anything else keeps its DYNAMIC_UPDATE_SLICE (a copy of the cache, as before).
"""

from __future__ import annotations

import numpy as np

from ..kernels import registry
from ..kernels.attention import ATTENTION, VIEWS
from ..kernels.kv_cache import KV_CACHE_WRITE, flat_shape
from ..kernels.layout_view import Step
from ..model.ir import Graph, Op, Options
from .graph_utils import with_fields


def kv_cache_in_place(graph: Graph) -> Graph:
    graph = graph.copy()
    readers = graph.consumers()
    for i, op in enumerate(graph.ops):
        if op.code != "DYNAMIC_UPDATE_SLICE":
            continue
        found = _rewrite(graph, i, op, readers)
        if found is not None:  # K and V feed one ATTENTION: each rewrite starts from the last one's
            graph.ops = [found.get(j, o) for j, o in enumerate(graph.ops)]
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
    if registry.check(write, graph) is not None:
        return None
    first = Step("RESHAPE", flat_shape(shape), shape)
    result = {i: write}
    for j in readers.get(out, []):
        reader = graph.ops[j]
        if reader.code != ATTENTION or reader.inputs[0] == out or (len(reader.inputs) > 3 and reader.inputs[3] == out):
            return None
        fields = {}
        for position in (1, 2):
            if reader.inputs[position] == out:
                fields[VIEWS[position]] = (first, *(reader.opt(VIEWS[position]) or ()))
        candidate = with_fields(reader, **fields)
        if registry.check(candidate, graph) is not None:
            return None
        result[j] = candidate
    return result
