"""Comparisons, logical ops and selects: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Op
from ._common import (
    BINARY,
    BOOL,
    UNARY,
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _broadcast,
    _r,
    bool_output,
    broadcast_inputs,
    finish_rules,
    registrar,
    same_dtype,
)

NAME = "compare and select"
CODES: tuple[str, ...] = (
    "EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_NOT",
    "LOGICAL_OR", "SELECT", "SELECT_V2", "WHERE")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def select_shape(v: OpView) -> list[tuple[int, ...]]:
    """SELECT_V2 broadcasts all three; SELECT takes x and y of one shape and a condition of that shape, a
    scalar, or a vector over x's first dimension (LiteRT's select.cc)."""
    cond, x, y = v.shape(0), v.shape(1), v.shape(2)
    if v.op.code == "SELECT_V2":
        return [_broadcast(cond, x, y)]
    if x != y:
        raise Invalid(f"x {x} and y {y} must have the same shape")
    if cond != x and cond != () and not (len(cond) == 1 and x and cond[0] == x[0]):
        raise Invalid(f"condition {cond} must have x's shape {x}, be a scalar or a vector over its first dimension")
    return [x]


def select_types(v: OpView) -> None:
    if v.tensor(0).dtype != BOOL:
        raise Invalid(f"condition ({v.tensor(0).name!r}) is {v.tensor(0).dtype}, must be bool")
    same_dtype([1, 2])(v)


COMPARE = _r(2, 1, checks=[same_dtype([0, 1], outputs=False), bool_output], shape=broadcast_inputs)


RULES: dict[str, Rule] = {
    "LOGICAL_NOT": UNARY,
    **dict.fromkeys(["LOGICAL_AND", "LOGICAL_OR"], BINARY),
    **dict.fromkeys(["EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"], COMPARE),
    "SELECT": _r(3, 1, checks=[select_types], shape=select_shape),
    "SELECT_V2": _r(3, 1, checks=[select_types], shape=select_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "WHERE": ((1, 1), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "LOGICAL_NOT": ("b", ""),
    "LOGICAL_AND": ("b", ""),
    "LOGICAL_OR": ("b", ""),
    "EQUAL": ("s b f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "NOT_EQUAL": ("s b f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "GREATER": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "GREATER_EQUAL": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "LESS": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "LESS_EQUAL": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "SELECT": ("*", ""),
    "SELECT_V2": ("*", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"WHERE": 4}  # the coordinates of the true elements: as many as the run finds


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


@builtin("SELECT", "SELECT_V2")
def _select(n: Node) -> list[np.ndarray]:
    cond, a, b = n.x(0).astype(bool), n.x(1), n.x(2)
    if n.op.code == "SELECT" and cond.ndim == 1 and a.ndim > 1 and cond.shape[0] == a.shape[0]:
        cond = cond.reshape((-1,) + (1,) * (a.ndim - 1))  # TF1 Select: a vector condition picks rows
    return [np.where(cond, a, b)]


builtin("LOGICAL_NOT")(lambda n, fn=np.logical_not: [fn(n.x())])
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "EQUAL": np.equal, "NOT_EQUAL": np.not_equal,
    "GREATER": np.greater, "GREATER_EQUAL": np.greater_equal, "LESS": np.less, "LESS_EQUAL": np.less_equal,
    "LOGICAL_AND": np.logical_and, "LOGICAL_OR": np.logical_or,
}
for _code, _fn in _BINARY.items():
    builtin(_code)(lambda n, fn=_fn: [fn(n.x(0), n.x(1))])
