"""GATHER of a constant int8 / int4 table followed by DEQUANTIZE -> one GATHER with a float output.

LiteRT gathers quantized rows and dequantizes them in a second op (its GATHER keeps the type; a table with one
scale is the form LiteRT runs, int4 included). The GPU reads the table packed and scales each value in the gather
itself (lowering/kernels/dynamic_index.py `_table`, as for a hybrid EMBEDDING_LOOKUP), so the table stays int8 / int4 in
GPU memory and the dequantized copy costs no dispatch. Only where the DEQUANTIZE is the gather's one reader and
the gathered tensor carries the table's own scale.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.ir import Graph
from ..model.quantization import int8_values


def _same_scale(graph: Graph, a: int, b: int) -> bool:
    qa, qb = graph.tensors[a].quantization, graph.tensors[b].quantization
    return (qa is not None and qb is not None and not qa.blockwise and not qb.blockwise and qa.scale.size == 1
            and np.array_equal(qa.scale, qb.scale) and not np.any(qb.zero_point))


def fold_gather_dequantize(graph: Graph) -> Graph:
    graph = graph.copy()
    producers, consumers = graph.producers(), graph.consumers()
    dropped = set()
    for i, op in enumerate(graph.ops):
        if op.code != "DEQUANTIZE" or len(op.inputs) != 1 or op.inputs[0] not in producers:
            continue
        src, out = op.inputs[0], op.outputs[0]
        g = producers[src]
        gather = graph.ops[g]
        if gather.code != "GATHER" or len(gather.inputs) != 2 or consumers.get(src) != [i] or src in graph.outputs:
            continue
        table = graph.tensors[gather.inputs[0]]
        if table.data is None or int8_values(table) is None or graph.tensors[out].dtype != np.float32 \
                or not _same_scale(graph, gather.inputs[0], src):
            continue
        graph.ops[g] = dataclasses.replace(gather, outputs=[out])
        dropped.add(i)
    graph.ops = [op for i, op in enumerate(graph.ops) if i not in dropped]
    return graph
