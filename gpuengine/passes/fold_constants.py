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

import numpy as np

from ..model.folding import FOLDERS, NEVER_FOLDED
from ..model.ir import Graph, Model, Op, Tensor

MAX_FOLDED_BYTES = 64 << 20  # generic folds that would materialize more than this stay ops
_WEIGHT_FOLDS = ("DEQUANTIZE", "DENSIFY")  # exact by construction, any size, shape taken from the output


def _static(t: Tensor) -> bool:
    """The shape is known now (a resize_tensor_input re-derives shapes and folds again)."""
    return all(d >= 0 for d in t.shape)


def _foldable(op: Op, graph: Graph) -> bool:
    if op.code in NEVER_FOLDED or op.is_custom or op.intermediates or not op.outputs:
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
    from ..litert_logging import without_litert_info
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
        with without_litert_info():
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
