"""Fold every subgraph whose inputs are all constants or static shapes into constant tensors at load time.

DEQUANTIZE of fp16/int8 weights and DENSIFY of sparse weights, SHAPE of a tensor with a static shape, then
any op whose inputs are all constant: evaluated with numpy for the ops Keras shape chains emit
(SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE ...), else by running that single op on LiteRT's CPU interpreter
when it is installed, else left in place. The folded op disappears; its output keeps its tensor index and
gains data. A folded graph output stays an output: the engine serves it from the host (engine.constants).
A numpy result whose shape or dtype disagrees with the declared output is never used (LiteRT decides).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..model.ir import Graph, Model, Op, Tensor
from .densify import densify

# Never folded: state, randomness, control flow and resources have no single value to bake.
_NEVER = {"RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "VAR_HANDLE", "READ_VARIABLE",
          "ASSIGN_VARIABLE", "CALL_ONCE", "WHILE", "IF", "CALL", "HASHTABLE", "HASHTABLE_FIND",
          "HASHTABLE_IMPORT", "HASHTABLE_SIZE", "RANDOM_SHUFFLE"}
MAX_FOLDED_BYTES = 64 << 20  # generic folds that would materialize more than this stay ops


def unpack_int4(t: Tensor) -> np.ndarray:
    """TFLite's INT4 buffers hold two values a byte, the first in the low nibble, both sign-extended."""
    raw = np.asarray(t.data, np.uint8).reshape(-1)
    values = np.empty(raw.size * 2, np.int8)
    values[0::2] = (raw << 4).astype(np.uint8).view(np.int8) >> 4
    values[1::2] = raw.view(np.int8) >> 4
    return values[:t.size].reshape(t.shape)


def pack_int4(values: np.ndarray) -> np.ndarray:
    """unpack_int4's inverse: values in -8..7 as TFLite's INT4 bytes (row-major, first value in the low nibble)."""
    flat = np.asarray(values, np.int8).reshape(-1)
    assert flat.size == 0 or (flat.min() >= -8 and flat.max() <= 7), "int4 values out of range"
    nibbles = np.zeros(flat.size + flat.size % 2, np.uint8)
    nibbles[:flat.size] = flat.view(np.uint8) & 0xF
    return nibbles[0::2] | (nibbles[1::2] << 4)


def dequantize(t: Tensor) -> np.ndarray:
    data = unpack_int4(t) if t.type_code == 17 else np.asarray(t.data)
    if data.dtype == np.float16 or t.quantization is None:
        return data.astype(np.float32)
    q = t.quantization
    if q.blockwise:  # a scale per run of block_size values along the last axis
        return (data.astype(np.float32) * np.repeat(q.block_scales.astype(np.float32), q.block_size, axis=-1))
    shape = [1] * data.ndim
    if q.per_channel:
        shape[q.axis] = -1
    scale = q.scale.astype(np.float32).reshape(shape)
    zero = (q.zero_point if q.zero_point.size else np.zeros(1)).astype(np.float32).reshape(shape)
    return ((data.astype(np.float32) - zero) * scale).astype(np.float32)


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
_WEIGHT_FOLDS = ("DEQUANTIZE", "DENSIFY")  # exact by construction, any size, shape taken from the output


def _static(t: Tensor) -> bool:
    """The shape is known now (a resize_tensor_input re-derives shapes and folds again)."""
    return all(d >= 0 for d in t.shape)


def _foldable(op: Op, graph: Graph) -> bool:
    if op.code in _NEVER or op.is_custom or op.intermediates or not op.outputs:
        return False
    ins = [t for t in op.inputs if t >= 0]
    if not ins:
        return False
    if op.code == "SHAPE":
        return _static(graph.tensors[ins[0]])
    return all(graph.tensors[t].data is not None and not graph.tensors[t].is_variable for t in ins)


def _fits(value: np.ndarray, t: Tensor) -> bool:
    return tuple(value.shape) == tuple(t.shape) and value.dtype == t.dtype


def _evaluate(op: Op, graph: Graph) -> list[np.ndarray] | None:
    """The op's output values, or None when it cannot be evaluated here exactly."""
    outs = [graph.tensors[t] for t in op.outputs]
    if op.code in _WEIGHT_FOLDS:
        values = FOLDERS[op.code](op, graph)
        return [np.ascontiguousarray(v, dtype=o.dtype).reshape(o.shape) for v, o in zip(values, outs)]
    if any(np.dtype(o.dtype) == np.object_ or o.type_code in (5, 13, 14, 17) for o in outs) \
            or sum(o.size * np.dtype(o.dtype).itemsize for o in outs) > MAX_FOLDED_BYTES:
        return None
    folder = FOLDERS.get(op.code)
    if folder is not None:
        try:
            values = [np.asarray(v) for v in folder(op, graph)]
            if len(values) == len(outs):
                values = [v.astype(o.dtype) if v.dtype != o.dtype and op.code == "SHAPE" else v
                          for v, o in zip(values, outs)]
                if all(_fits(v, o) for v, o in zip(values, outs)):
                    return [np.array(v, order="C") for v in values]  # (ascontiguousarray makes 0-d 1-d)
        except (NotImplementedError, ValueError, IndexError, TypeError):
            pass
    return _evaluate_litert(op, graph)


def _evaluate_litert(op: Op, graph: Graph) -> list[np.ndarray] | None:
    """Run the single op on LiteRT's CPU interpreter (a 1-op model with its constant inputs baked in)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    from ..model.builder import _OPTION_CODES, give_bias, write_model

    if op.options is not None and op.options.kind not in _OPTION_CODES:
        return None  # options the writer cannot express: running without them would be wrong
    ins = [t for t in op.inputs if t >= 0]
    if op.code == "SHAPE" or any(graph.tensors[t].sparsity is not None for t in ins):
        return None
    order = list(dict.fromkeys([*ins, *op.outputs]))
    remap = {t: k for k, t in enumerate(order)}
    tensors = [dataclasses.replace(graph.tensors[t], index=remap[t]) for t in order]
    one = dataclasses.replace(op, index=0, inputs=[remap[t] if t >= 0 else -1 for t in op.inputs],
                              outputs=[remap[t] for t in op.outputs])
    give_bias(one, tensors)
    sub = Graph(tensors=tensors, ops=[one], inputs=[], outputs=[remap[t] for t in op.outputs], name="fold")
    try:
        it = Interpreter(model_content=write_model(Model(subgraphs=[sub])))
        it.allocate_tensors()
        it.invoke()
        values = [np.array(it.get_tensor(remap[t])) for t in op.outputs]
    except Exception:  # noqa: BLE001 - LiteRT refusing the op just means it stays an op
        return None
    outs = [graph.tensors[t] for t in op.outputs]
    return values if all(_fits(v, o) for v, o in zip(values, outs)) else None


def fold_constants(graph: Graph) -> Graph:
    """Fold ops in execution order, so chains (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE) collapse at once."""
    graph = graph.copy()
    kept: list[Op] = []
    for op in graph.ops:
        values = _evaluate(op, graph) if _foldable(op, graph) else None
        if values is None:
            kept.append(op)
            continue
        for t, value in zip(op.outputs, values):
            graph.tensors[t] = dataclasses.replace(graph.tensors[t], data=value, sparsity=None)
    graph.ops = kept
    return graph
