"""Gathers, scatters and indexed updates: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Op
from ._common import (
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _axis,
    _r,
    _val,
    finish_rules,
    index_dtype,
    registrar,
    same_dtype,
)

NAME = "gather and index"
CODES: tuple[str, ...] = (
    "GATHER", "GATHER_ND", "EMBEDDING_LOOKUP", "SCATTER_ND", "DYNAMIC_UPDATE_SLICE", "UNIQUE")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def gather_shape(v: OpView) -> list[tuple[int, ...]]:
    params, indices = v.shape(0), v.shape(1)
    axis = v.axis(int(v.opt("axis")), len(params))
    batch = int(v.opt("batch_dims"))
    batch = batch + len(indices) if batch < 0 else batch
    if not 0 <= batch <= min(axis, len(indices)) or params[:batch] != indices[:batch]:
        raise Invalid(f"batch_dims {v.opt('batch_dims')} does not fit params {params}, indices {indices}, "
                      f"axis {axis}")
    values = v.ints(1)
    if values is not None and values and (min(values) < 0 or max(values) >= params[axis]):
        raise Invalid(f"constant indices {sorted(set(values))[:8]} are out of range for dimension {axis} of "
                      f"{params}")
    return [(*params[:axis], *indices[batch:], *params[axis + 1:])]


def gather_nd_shape(v: OpView) -> list[tuple[int, ...]]:
    params, indices = v.shape(0), v.shape(1)
    if not indices or indices[-1] > len(params):
        raise Invalid(f"indices {indices} index more dimensions than params {params} has")
    return [(*indices[:-1], *params[indices[-1]:])]


def embedding_lookup_shape(v: OpView) -> list[tuple[int, ...]]:
    ids, table = v.shape(0), v.shape(1)
    if len(ids) != 1 or len(table) < 2:
        raise Invalid(f"ids {ids} must be a vector and the table {table} of rank >= 2")
    values = v.ints(0)
    if values is not None and values and (min(values) < 0 or max(values) >= table[0]):
        raise Invalid(f"constant ids are out of range for a table of {table[0]} rows")
    return [(ids[0], *table[1:])]


def dynamic_update_slice_shape(v: OpView) -> list[tuple[int, ...]]:
    operand, update = v.shape(0), v.shape(1)
    if len(update) != len(operand) or any(u > o for u, o in zip(update, operand)):
        raise Invalid(f"update {update} does not fit in operand {operand}")
    if v.shape(2) != (len(operand),):
        raise Invalid(f"start_indices have shape {v.shape(2)}, must be [{len(operand)}]")
    return [operand]


RULES: dict[str, Rule] = {
    "GATHER": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=gather_shape),
    "GATHER_ND": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=gather_nd_shape),
    "EMBEDDING_LOOKUP": _r(2, 1, checks=[index_dtype(0)], shape=embedding_lookup_shape),
    "DYNAMIC_UPDATE_SLICE": _r(3, 1, checks=[index_dtype(2), same_dtype([0, 1])], shape=dynamic_update_slice_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "SCATTER_ND": ((3, 3), (1, 1)),
    "UNIQUE": ((1, 1), (2, 2)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "GATHER": ("s b f16 f32 i16 i32 i64 i8 u8", ""),
    "GATHER_ND": ("s b f16 f32 i16 i32 i64 i8 u8", ""),
    "DYNAMIC_UPDATE_SLICE": ("*", ""),
    "EMBEDDING_LOOKUP": ("*", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"UNIQUE": 4}


def _gather_values(v: OpView) -> list | None:
    """shape[i] as a GATHER with constant indices reads it."""
    values, indices = v.ints(0), v.ints(1)
    if values is None or indices is None or v.rank(0) != 1:
        return None
    return [values[i] for i in indices]


SYMBOLIC_VALUES: dict[str, Callable[[OpView], list | None]] = {"GATHER": _gather_values}


# -- constant folding -------------------------------------------------------------------------------------------------
def _fold_gather(op: Op, graph: Graph) -> list[np.ndarray]:
    if op.opt("batch_dims", 0):
        raise NotImplementedError
    x, idx = _val(graph, op, 0), _val(graph, op, 1)
    if (idx < 0).any() or (idx >= x.shape[_axis(op.opt("axis", 0), x.ndim)]).any():
        raise NotImplementedError
    return [np.take(x, idx, axis=_axis(op.opt("axis", 0), x.ndim))]


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "GATHER": _fold_gather,
}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


@builtin("GATHER")
def _gather(n: Node) -> list[np.ndarray]:
    params, indices = n.x(0), n.x(1).astype(np.int64)
    axis, batch = int(n.opt("axis", 0)), int(n.opt("batch_dims", 0))
    axis, batch = axis + params.ndim if axis < 0 else axis, batch + indices.ndim if batch < 0 else batch
    if batch == 0:
        return [np.take(params, indices, axis=axis)]
    lead = params.shape[:batch]
    parts = [np.take(params[i], indices[i], axis=axis - batch) for i in np.ndindex(*lead)]
    return [np.stack(parts).reshape(n.out_shape())]


@builtin("EMBEDDING_LOOKUP")
def _embedding_lookup(n: Node) -> list[np.ndarray]:
    ids, table = n.x(0).astype(np.int64), n.x(1)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(f"EMBEDDING_LOOKUP: id outside [0, {table.shape[0]})")
    return [table[ids]]


@builtin("GATHER_ND")
def _gather_nd(n: Node) -> list[np.ndarray]:
    params, indices = n.x(0), n.x(1).astype(np.int64)
    k = indices.shape[-1]
    if indices.size and (indices.min() < 0 or (indices >= np.array(params.shape[:k])).any()):
        raise ValueError("GATHER_ND: index out of bounds")
    return [params[tuple(np.moveaxis(indices, -1, 0))]]


@builtin("DYNAMIC_UPDATE_SLICE")
def _dynamic_update_slice(n: Node) -> list[np.ndarray]:
    """The update placed at the start offsets, each clamped so that the update fits (XLA's and LiteRT's rule)."""
    operand, update = n.x(0).copy(), n.x(1)
    start = [min(max(int(s), 0), d - u) for s, d, u in zip(n.ints(2), operand.shape, update.shape)]
    operand[tuple(slice(s, s + u) for s, u in zip(start, update.shape))] = update
    return [operand]
