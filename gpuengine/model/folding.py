"""Constant-folding evaluators: an op's value computed with numpy when all its inputs are constants.

passes/fold_constants.py applies them at load (and falls back to LiteRT's CPU kernels for ops not here);
model/shapes.py uses them to propagate values that decide shapes (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .densify import densify
from .ir import Graph, Op
from .quantization import dequantize

# Never folded: state, randomness, control flow and resources have no single value to bake.
NEVER_FOLDED = {"RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "VAR_HANDLE", "READ_VARIABLE",
          "ASSIGN_VARIABLE", "CALL_ONCE", "WHILE", "IF", "CALL", "HASHTABLE", "HASHTABLE_FIND",
          "HASHTABLE_IMPORT", "HASHTABLE_SIZE", "RANDOM_SHUFFLE"}

def _val(graph: Graph, op: Op, i: int) -> np.ndarray:
    return np.asarray(graph.tensors[op.inputs[i]].data)


def _ints(graph: Graph, op: Op, i: int) -> list[int]:
    return [int(v) for v in _val(graph, op, i).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _strided_slice(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    begin, end, strides = _ints(graph, op, 1), _ints(graph, op, 2), _ints(graph, op, 3)
    if op.opt("ellipsis_mask", 0) or op.opt("new_axis_mask", 0) or len(begin) > x.ndim or 0 in strides:
        raise NotImplementedError  # rare in shape chains: LiteRT evaluates it
    index, shrink = [], []
    for d in range(len(begin)):
        b, e, s = begin[d], end[d], strides[d]
        if op.opt("offset", False):
            e = b + e
        if op.opt("shrink_axis_mask", 0) >> d & 1:
            b = b + x.shape[d] if b < 0 else b
            index.append(slice(b, b + 1, 1))
            shrink.append(d)
            continue
        index.append(slice(None if op.opt("begin_mask", 0) >> d & 1 else b,
                           None if op.opt("end_mask", 0) >> d & 1 else e, s))
    out = x[tuple(index)]
    return [out.reshape([n for d, n in enumerate(out.shape) if d not in shrink])]


def _slice(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    begin, size = _ints(graph, op, 1), _ints(graph, op, 2)
    return [x[tuple(slice(b, x.shape[d] if n < 0 else b + n) for d, (b, n) in enumerate(zip(begin, size)))]]


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Op, Graph], list[np.ndarray]]:
    def fold(op: Op, graph: Graph) -> list[np.ndarray]:
        if op.opt("fused_activation_function", 0):
            raise NotImplementedError
        a, b = _val(graph, op, 0), _val(graph, op, 1)
        if a.dtype != b.dtype:
            raise NotImplementedError
        return [np.asarray(fn(a, b)).astype(a.dtype)]
    return fold


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        if (b == 0).any():
            raise NotImplementedError  # LiteRT reports the error; leave the op in place
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) ^ (b < 0), -q, q)  # C++ integer division truncates toward zero
    return a / b


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        if (b == 0).any():
            raise NotImplementedError
        return np.floor_divide(a, b)
    return np.floor(a / b)


def _range(op: Op, graph: Graph) -> list[np.ndarray]:
    start, limit, delta = (_val(graph, op, i).reshape(()) for i in range(3))
    if delta == 0:
        raise NotImplementedError
    n = int(np.ceil(np.abs((limit - start) / delta))) if np.issubdtype(start.dtype, np.floating) \
        else -(-abs(int(limit) - int(start)) // abs(int(delta)))
    if (limit - start) * delta < 0:
        n = 0
    steps = np.full(n, delta, start.dtype)
    steps[:1] = start
    return [np.add.accumulate(steps, dtype=start.dtype)]  # TFLite adds delta step by step


def _gather(op: Op, graph: Graph) -> list[np.ndarray]:
    if op.opt("batch_dims", 0):
        raise NotImplementedError
    x, idx = _val(graph, op, 0), _val(graph, op, 1)
    if (idx < 0).any() or (idx >= x.shape[_axis(op.opt("axis", 0), x.ndim)]).any():
        raise NotImplementedError
    return [np.take(x, idx, axis=_axis(op.opt("axis", 0), x.ndim))]


def _out_shape(op: Op, graph: Graph) -> list[np.ndarray]:
    """RESHAPE / SQUEEZE / EXPAND_DIMS: the declared output shape is the answer (checked after)."""
    return [_val(graph, op, 0).reshape(graph.tensors[op.outputs[0]].shape)]


def _concat(op: Op, graph: Graph) -> list[np.ndarray]:
    if op.opt("fused_activation_function", 0):
        raise NotImplementedError
    xs = [_val(graph, op, i) for i in range(len(op.inputs))]
    return [np.concatenate(xs, axis=_axis(op.opt("axis", 0), xs[0].ndim))]


def _reduce_prod(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    axes = tuple(sorted({_axis(a, x.ndim) for a in _ints(graph, op, 1)}))
    return [np.prod(x, axis=axes, keepdims=bool(op.opt("keep_dims", False))).astype(x.dtype)]


def _unpack(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    return list(np.moveaxis(x, _axis(op.opt("axis", 0), x.ndim), 0))


def _fill(op: Op, graph: Graph) -> list[np.ndarray]:
    value = _val(graph, op, 1)
    return [np.full(_ints(graph, op, 0), value.reshape(()), value.dtype)]


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "DEQUANTIZE": lambda op, g: [dequantize(g.tensors[op.inputs[0]])],
    "DENSIFY": lambda op, g: [densify(g.tensors[op.inputs[0]], g.tensors[op.outputs[0]].shape)],
    "SHAPE": lambda op, g: [np.array(g.tensors[op.inputs[0]].shape)],
    "STRIDED_SLICE": _strided_slice,
    "SLICE": _slice,
    "PACK": lambda op, g: [np.stack([_val(g, op, i) for i in range(len(op.inputs))],
                                    axis=_axis(op.opt("axis", 0), _val(g, op, 0).ndim + 1))],
    "UNPACK": _unpack,
    "CONCATENATION": _concat,
    "RESHAPE": _out_shape, "SQUEEZE": _out_shape, "EXPAND_DIMS": _out_shape,
    "GATHER": _gather,
    "CAST": lambda op, g: [_val(g, op, 0).astype(g.tensors[op.outputs[0]].dtype)],
    "ADD": _binary(np.add), "SUB": _binary(np.subtract), "MUL": _binary(np.multiply), "DIV": _binary(_div),
    "FLOOR_DIV": _binary(_floor_div), "MAXIMUM": _binary(np.maximum), "MINIMUM": _binary(np.minimum),
    "RANGE": _range,
    "FILL": _fill,
    "TRANSPOSE": lambda op, g: [np.transpose(_val(g, op, 0), _ints(g, op, 1))],
    "REDUCE_PROD": _reduce_prod,
}
