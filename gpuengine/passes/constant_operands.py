"""Constants a WHILE / IF hands to its subgraphs become constants inside them.

Keras models converted with TF2 control flow pass the weights a branch or loop body uses as operands of the IF /
WHILE op (constants of the calling graph) instead of holding them in the subgraph: inside, a conv's filter is a
subgraph input, a TRANSPOSE of it gives the layout TFLite wants and a BATCH_MATMUL stands for a dense layer.  Seen
from the subgraph alone nothing is constant, so nothing folds and the conv falls back to the CPU ("weights must be
constant").  Giving those inputs the calling graph's values lets fold_constants and the GPU kernels treat them as
the weights they are.  The subgraph keeps its inputs (the host still feeds every operand, positionally); only the
tensors gain data.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.ir import Graph

__all__ = ["bind_constant_operands"]


def bind_constant_operands(graph: Graph, values: dict[int, np.ndarray]) -> Graph:
    """A copy of `graph` whose input at position k holds `values[k]` as constant data (shape and dtype checked:
    a value that does not fit the input is left out, the input staying a run-time one)."""
    if not values:
        return graph
    out = graph.copy()
    for k, value in values.items():
        if not 0 <= k < len(out.inputs):
            continue
        t = out.inputs[k]
        tensor = out.tensors[t]
        value = np.asarray(value)
        if tensor.is_variable or tuple(value.shape) != tuple(tensor.shape) or value.dtype != np.dtype(tensor.dtype):
            continue
        out.tensors[t] = dataclasses.replace(tensor, data=value)
    return out
