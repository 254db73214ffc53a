"""Ops whose values are shapes or filled tensors: SHAPE, RANK, FILL, RANGE, ZEROS_LIKE ...: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Op
from ._common import (
    INDEX,
    UNARY,
    Fn,
    OpView,
    Rule,
    _ints,
    _r,
    _val,
    dtype_in,
    finish_rules,
    registrar,
)

NAME = "shape values"
CODES: tuple[str, ...] = (
    "SHAPE", "RANK", "FILL", "RANGE", "ZEROS_LIKE", "BROADCAST_ARGS", "ONE_HOT")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def shape_shape(v: OpView) -> list[tuple[int, ...]]:
    return [(v.rank(0),)]


RULES: dict[str, Rule] = {
    "ZEROS_LIKE": UNARY,
    "SHAPE": _r(1, 1, checks=[dtype_in(-1, INDEX, "int32 or int64")], shape=shape_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "FILL": ((2, 2), (1, 1)),
    "RANGE": ((3, 3), (1, 1)),
    "ONE_HOT": ((4, 4), (1, 1)),
    "RANK": ((1, 1), (1, 1)),
    "BROADCAST_ARGS": ((2, 2), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "ZEROS_LIKE": ("f32 i32 i64", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"SHAPE": 1, "RANK": 1, "FILL": 3, "RANGE": 3, "BROADCAST_ARGS": 3, "ONE_HOT": 3}
SYMBOLIC_VALUES: dict[str, Callable[[OpView], list | None]] = {
    "SHAPE": lambda v: list(v.shape(0)),
    "RANK": lambda v: [len(v.shape(0))],
}


# -- constant folding -------------------------------------------------------------------------------------------------
def _fold_range(op: Op, graph: Graph) -> list[np.ndarray]:
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


def _fold_fill(op: Op, graph: Graph) -> list[np.ndarray]:
    value = _val(graph, op, 1)
    return [np.full(_ints(graph, op, 0), value.reshape(()), value.dtype)]


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "SHAPE": lambda op, g: [np.array(g.tensors[op.inputs[0]].shape)],
    "RANGE": _fold_range,
    "FILL": _fold_fill,
}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


builtin("SHAPE")(lambda n: [np.asarray(n.x().shape, np.int64)])
builtin("ZEROS_LIKE")(lambda n, fn=np.zeros_like: [fn(n.x())])
