"""Elementwise ops (activations, arithmetic, ELEMENTWISE_TREE): what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ops
from ..dims import maximum
from ..ir import Graph, Op
from ._common import (
    BINARY,
    F64,
    UNARY,
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _broadcast,
    _r,
    _val,
    binary_values,
    finish_rules,
    finite,
    registrar,
    same_as_input,
    same_dtype,
)

NAME = "elementwise"
CODES: tuple[str, ...] = (
    "ABS", "ADD", "ADD_N", "ATAN2", "BITWISE_XOR", "CEIL", "COS", "DIV", "ELU", "EXP", "FLOOR", "FLOOR_DIV",
    "FLOOR_MOD", "GELU", "HARD_SWISH", "LEAKY_RELU", "LOG", "LOGISTIC", "MAXIMUM", "MINIMUM", "MUL", "NEG", "POW",
    "PRELU", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "RIGHT_SHIFT", "ROUND", "RSQRT", "SIGN", "SIN", "SQRT",
    "SQUARE", "SQUARED_DIFFERENCE", "SUB", "TANH", ops.ELEMENTWISE_TREE)


# -- validation and shape rules ---------------------------------------------------------------------------------------
def prelu_shape(v: OpView) -> list[tuple[int, ...]]:
    """alpha broadcasts to the input; the output has the input's shape (LiteRT's activations.cc)."""
    shape = _broadcast(v.shape(0), v.shape(1))
    if shape != v.shape(0):
        raise Invalid(f"alpha {v.shape(1)} does not broadcast to the input's shape {v.shape(0)}")
    return [shape]


RULES: dict[str, Rule] = {
    **dict.fromkeys(["ABS", "CEIL", "COS", "ELU", "EXP", "FLOOR", "GELU", "HARD_SWISH", "LOG", "LOGISTIC", "NEG",
                     "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "RSQRT", "SIN", "SQRT", "SQUARE", "TANH",
                     "ROUND", "SIGN"], UNARY),
    "LEAKY_RELU": _r(1, 1, checks=[same_dtype([0]), finite("alpha")], shape=same_as_input),
    **dict.fromkeys(["ADD", "SUB", "MUL", "DIV", "FLOOR_DIV", "FLOOR_MOD", "MAXIMUM", "MINIMUM", "POW",
                     "SQUARED_DIFFERENCE"], BINARY),
    "PRELU": _r(2, 1, checks=[same_dtype([0, 1])], shape=prelu_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "ADD_N": ((2, None), (1, 1)),
    "ATAN2": ((2, 2), (1, 1)),
    "BITWISE_XOR": ((2, 2), (1, 1)),
    "RIGHT_SHIFT": ((2, 2), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "ABS": ("f16 f32 i16 i32 i8", "i8"),
    "CEIL": ("f16 f32", ""),
    "COS": ("f16 f32", ""),
    "ELU": ("f16 f32 i8", ""),
    "EXP": ("f16 f32 i16 i8", ""),
    "FLOOR": ("f16 f32", ""),
    "GELU": ("f16 f32 i16 i8 u8", ""),
    "HARD_SWISH": ("f16 f32 i8 u8", ""),
    "LOG": ("f16 f32 i16 i8", "i16 i8"),
    "LOGISTIC": ("f16 f32 i16 i8 u8", "i8 u8"),
    "NEG": ("f16 f32 i16 i32 i64 i8", ""),
    "RELU": ("f16 f32 i16 i8 u8", ""),
    "RELU6": ("f16 f32 i16 i8 u8", ""),
    "RELU_0_TO_1": ("f32 i8 u8", ""),
    "RELU_N1_TO_1": ("f16 f32 i8 u8", ""),
    "RSQRT": ("f16 f32 i16 i8", "i16 i8"),
    "SIN": ("f16 f32", ""),
    "SQRT": ("f16 f32 i16 i8", "i16 i8"),
    "SQUARE": ("f16 f32", ""),
    "TANH": ("f16 f32 i16 i8 u8", ""),
    "ROUND": ("f16 f32", ""),
    "SIGN": ("f32 f64 i32", ""),
    "LEAKY_RELU": ("f16 f32 i16 i8 u8", ""),
    "ADD": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "SUB": ("f16 f32 i16 i32 i64 i8 u8", "i16 i8 u8"),
    "MUL": ("c64 f16 f32 i16 i32 i64 i8 u32 u8", ""),
    "DIV": ("f16 f32 i16 i32 i8 u8", ""),
    "FLOOR_DIV": ("f32 i16 i32 i8", ""),
    "FLOOR_MOD": ("f32 i16 i32 i64 i8", ""),
    "MAXIMUM": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "MINIMUM": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "POW": ("f32 i32", ""),
    "SQUARED_DIFFERENCE": ("f16 f32 i32 i8", "i8"),
    "PRELU": ("f32 i16 i8 u8", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
# Every op here is class 2 (its output shape follows its input shapes); the broadcast ops' equations come from their
# shape rule (broadcast_inputs) in model/symbolic.py.
SYMBOLIC_VALUES: dict[str, Callable[[OpView], list | None]] = {
    "ADD": binary_values(lambda a, b: a + b), "SUB": binary_values(lambda a, b: a - b),
    "MUL": binary_values(lambda a, b: a * b), "FLOOR_DIV": binary_values(lambda a, b: a // b),
    "MAXIMUM": binary_values(lambda a, b: maximum(a, b)),
}


# -- constant folding -------------------------------------------------------------------------------------------------
def _fold_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Op, Graph], list[np.ndarray]]:
    def fold(op: Op, graph: Graph) -> list[np.ndarray]:
        if op.opt("fused_activation_function", 0):
            raise NotImplementedError
        a, b = _val(graph, op, 0), _val(graph, op, 1)
        if a.dtype != b.dtype:
            raise NotImplementedError
        return [np.asarray(fn(a, b)).astype(a.dtype)]
    return fold


def _fold_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        if (b == 0).any():
            raise NotImplementedError  # LiteRT reports the error; leave the op in place
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) ^ (b < 0), -q, q)  # C++ integer division truncates toward zero
    return a / b


def _fold_floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        if (b == 0).any():
            raise NotImplementedError
        return np.floor_divide(a, b)
    return np.floor(a / b)


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "ADD": _fold_binary(np.add),
    "SUB": _fold_binary(np.subtract),
    "MUL": _fold_binary(np.multiply),
    "DIV": _fold_binary(_fold_div),
    "FLOOR_DIV": _fold_binary(_fold_floor_div),
    "MAXIMUM": _fold_binary(np.maximum),
    "MINIMUM": _fold_binary(np.minimum),
}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[F64])(x)
    return erf(x)


def _gelu(n: Node) -> np.ndarray:
    x = n.x()
    if n.opt("approximate", False):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite's integer DIV: C++ division, truncating toward zero."""
    return np.trunc(a.astype(F64) / b).astype(np.int64)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _int_div(a, b) if a.dtype.kind in "iu" and b.dtype.kind in "iu" else a / b


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.floor_divide(a, b) if a.dtype.kind in "iu" and b.dtype.kind in "iu" else np.floor(a / b)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ABS": np.abs, "CEIL": np.ceil, "COS": np.cos, "EXP": np.exp, "FLOOR": np.floor, "LOG": np.log,
    "NEG": np.negative, "SIN": np.sin, "SQRT": np.sqrt, "SQUARE": np.square, "TANH": np.tanh, "ROUND": np.round,
    "SIGN": np.sign, "RSQRT": lambda x: 1.0 / np.sqrt(x), "LOGISTIC": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "ELU": lambda x: np.where(x < 0, np.expm1(np.minimum(x, 0)), x),
    "HARD_SWISH": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "RELU": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0.0)),
    "RELU6": lambda x: np.where(np.isnan(x), x, np.clip(x, 0.0, 6.0)),
    "RELU_0_TO_1": lambda x: np.where(np.isnan(x), x, np.clip(x, 0.0, 1.0)),
    "RELU_N1_TO_1": lambda x: np.where(np.isnan(x), x, np.clip(x, -1.0, 1.0)),
}
for _code, _fn in _UNARY.items():
    builtin(_code)(lambda n, fn=_fn: [fn(n.x())])
builtin("GELU")(lambda n: [_gelu(n)])
builtin("LEAKY_RELU")(lambda n: [np.where(n.x() >= 0, n.x(), n.x() * F64(n.opt("alpha", 0.0)))])
builtin("PRELU")(lambda n: [np.where(n.x(0) >= 0, n.x(0), n.x(0) * n.x(1))])

_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": _divide, "FLOOR_DIV": _floor_div,
    "FLOOR_MOD": np.mod, "MAXIMUM": np.maximum, "MINIMUM": np.minimum, "POW": np.power,
    "SQUARED_DIFFERENCE": lambda a, b: np.square(a - b),
}
_WITH_ACTIVATION = {"ADD", "SUB", "MUL", "DIV"}
for _code, _fn in _BINARY.items():
    if _code in _WITH_ACTIVATION:
        builtin(_code)(lambda n, fn=_fn: [n.act(fn(n.x(0), n.x(1)))])
    else:
        builtin(_code)(lambda n, fn=_fn: [fn(n.x(0), n.x(1))])
