"""Reductions, arg max/min, segment ops, top-k: what each op means.

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
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _axis,
    _ints,
    _r,
    _val,
    dtype_in,
    finish_rules,
    index_dtype,
    registrar,
    same_dtype,
)

NAME = "reduction"
CODES: tuple[str, ...] = (
    "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ALL", "REDUCE_ANY", "ARG_MAX", "ARG_MIN",
    "CUMSUM", "SEGMENT_SUM", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN", "UNSORTED_SEGMENT_PROD",
    "UNSORTED_SEGMENT_SUM", "TOPK_V2")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def reduce_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axes = v.ints(1)
    if axes is None:
        return None
    shape = v.shape(0)
    dims = {v.axis(a, len(shape)) for a in axes}
    if v.opt("keep_dims"):
        return [tuple(1 if d in dims else s for d, s in enumerate(shape))]
    return [tuple(s for d, s in enumerate(shape) if d not in dims)]


def arg_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axis = v.ints(1)
    if axis is None:
        return None
    if len(axis) != 1:
        raise Invalid(f"axis must be one value, got {axis}")
    shape = v.shape(0)
    a = v.axis(axis[0], len(shape))
    return [shape[:a] + shape[a + 1:]]


REDUCE = _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=reduce_shape, options="ReducerOptions")


RULES: dict[str, Rule] = {
    **dict.fromkeys(["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL"], REDUCE),
    "ARG_MAX": _r(2, 1, checks=[index_dtype(1), dtype_in(-1, INDEX, "int32 or int64")], shape=arg_shape),
    "ARG_MIN": _r(2, 1, checks=[index_dtype(1), dtype_in(-1, INDEX, "int32 or int64")], shape=arg_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "TOPK_V2": ((2, 2), (2, 2)),
    "CUMSUM": ((2, 2), (1, 1)),
    "SEGMENT_SUM": ((2, 2), (1, 1)),
    "UNSORTED_SEGMENT_SUM": ((3, 3), (1, 1)),
    "UNSORTED_SEGMENT_PROD": ((3, 3), (1, 1)),
    "UNSORTED_SEGMENT_MAX": ((3, 3), (1, 1)),
    "UNSORTED_SEGMENT_MIN": ((3, 3), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "MEAN": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "SUM": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "REDUCE_MAX": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "REDUCE_MIN": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "REDUCE_PROD": ("f32 i16 i32 i64 i8 u8", ""),
    "REDUCE_ANY": ("b", ""),
    "REDUCE_ALL": ("b", ""),
    "CUMSUM": ("f32 i32 i64", ""),
    "ARG_MAX": ("b f32 i32 i8 u8", ""),
    "ARG_MIN": ("b f32 i32 i8 u8", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {
    **dict.fromkeys(["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ALL", "REDUCE_ANY", "ARG_MAX",
                     "ARG_MIN", "TOPK_V2", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN", "UNSORTED_SEGMENT_PROD",
                     "UNSORTED_SEGMENT_SUM"], 3),  # the axes (k, the segment count) are values
    "SEGMENT_SUM": 4,  # the output's length is the largest segment id + 1: known after it runs
}


# -- constant folding -------------------------------------------------------------------------------------------------
def _fold_reduce_prod(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    axes = tuple(sorted({_axis(a, x.ndim) for a in _ints(graph, op, 1)}))
    return [np.prod(x, axis=axes, keepdims=bool(op.opt("keep_dims", False))).astype(x.dtype)]


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "REDUCE_PROD": _fold_reduce_prod,
}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


def _axes(n: Node, rank: int) -> tuple[int, ...]:
    return tuple(sorted({a + rank if a < 0 else a for a in n.ints(1)}))


_REDUCERS = {"MEAN": np.mean, "SUM": np.sum, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min, "REDUCE_PROD": np.prod,
             "REDUCE_ALL": np.all, "REDUCE_ANY": np.any}


@builtin(*_REDUCERS)
def _reduce(n: Node) -> list[np.ndarray]:
    x = n.x()
    return [_REDUCERS[n.op.code](x, axis=_axes(n, x.ndim), keepdims=bool(n.opt("keep_dims", False)))]
