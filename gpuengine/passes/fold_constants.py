"""Fold ops whose inputs are all constant into constant tensors at load time (never dispatched).

Covers DEQUANTIZE of fp16/int8 weights and DENSIFY of sparse weights, plus any op in FOLDERS. The folded
op disappears; its output tensor keeps its index and gains data.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..model.ir import Graph, Op, Tensor
from .densify import densify


def dequantize(t: Tensor) -> np.ndarray:
    data = np.asarray(t.data)
    if data.dtype == np.float16 or t.quantization is None:
        return data.astype(np.float32)
    q = t.quantization
    shape = [1] * data.ndim
    if q.per_channel:
        shape[q.axis] = -1
    scale = q.scale.astype(np.float32).reshape(shape)
    zero = (q.zero_point if q.zero_point.size else np.zeros(1)).astype(np.float32).reshape(shape)
    return ((data.astype(np.float32) - zero) * scale).astype(np.float32)


def _dequantize(op: Op, graph: Graph) -> list[np.ndarray]:
    return [dequantize(graph.tensors[op.inputs[0]])]


def _densify(op: Op, graph: Graph) -> list[np.ndarray]:
    return [densify(graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]].shape)]


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "DEQUANTIZE": _dequantize,
    "DENSIFY": _densify,
}


def fold_constants(graph: Graph) -> Graph:
    """Repeatedly fold ops with constant inputs whose result we can compute exactly on the host."""
    graph = graph.copy()
    outputs = set(graph.outputs)
    kept: list[Op] = []
    for op in graph.ops:
        folder = FOLDERS.get(op.code)
        ins = [t for t in op.inputs if t >= 0]
        if folder and ins and all(graph.tensors[t].data is not None for t in ins) \
                and not any(t in outputs for t in op.outputs):
            for t, value in zip(op.outputs, folder(op, graph)):
                tensor = graph.tensors[t]
                tensor.data = np.ascontiguousarray(value, dtype=tensor.dtype).reshape(tensor.shape)
            continue
        kept.append(op)
    graph.ops = kept
    return graph
