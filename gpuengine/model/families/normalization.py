"""Softmax and normalizations (and the fused LAYER_NORM / RMS_NORM): what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ops
from ..ir import Graph, Op
from ._common import (
    ACTIVATION,
    F64,
    Fn,
    Node,
    OpView,
    Rule,
    _r,
    finish_rules,
    finite,
    ranks,
    registrar,
    same_as_input,
    same_dtype,
)

NAME = "normalization"
CODES: tuple[str, ...] = (
    "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION", ops.LAYER_NORM, ops.RMS_NORM)


# -- validation and shape rules ---------------------------------------------------------------------------------------
SOFTMAX_LIKE = _r(1, 1, checks=[ranks(in0=(1, 6)), same_dtype([0])], shape=same_as_input)


RULES: dict[str, Rule] = {
    "SOFTMAX": _r(1, 1, checks=[ranks(in0=(1, 6)), same_dtype([0]), finite("beta")], shape=same_as_input),
    "LOG_SOFTMAX": SOFTMAX_LIKE,
    "L2_NORMALIZATION": _r(1, 1, checks=[ranks(in0=(1, 6)), same_dtype([0]), ACTIVATION], shape=same_as_input),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "LOCAL_RESPONSE_NORMALIZATION": ((1, 1), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "SOFTMAX": ("f16 f32 i16 i8 u8", ""),
    "LOG_SOFTMAX": ("f32 i8 u8", ""),
    "L2_NORMALIZATION": ("f32 i8 u8", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


@builtin("SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")
def _softmax(n: Node) -> list[np.ndarray]:
    x = n.x()
    if n.op.code == "L2_NORMALIZATION":
        return [x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), 1e-6)]
    z = x * F64(n.opt("beta", 1.0)) if n.op.code == "SOFTMAX" else x
    z = z - np.max(z, axis=-1, keepdims=True)
    total = np.sum(np.exp(z), axis=-1, keepdims=True)
    return [np.exp(z) / total if n.op.code == "SOFTMAX" else z - np.log(total)]
