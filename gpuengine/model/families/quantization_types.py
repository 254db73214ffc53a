"""Quantization, type conversions and the complex / FFT ops: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..densify import densify
from ..ir import Graph, Op
from ..quantization import dequantize
from ._common import (
    Fn,
    OpView,
    Rule,
    _r,
    _val,
    finish_rules,
    float_output,
    registrar,
    same_as_input,
    same_dtype,
)

NAME = "quantization and types"
CODES: tuple[str, ...] = (
    "QUANTIZE", "DEQUANTIZE", "FAKE_QUANT", "CAST", "BITCAST", "DENSIFY", "COMPLEX_ABS", "REAL", "IMAG", "RFFT2D")


# -- validation and shape rules ---------------------------------------------------------------------------------------
RULES: dict[str, Rule] = {
    "DEQUANTIZE": _r(1, 1, checks=[float_output], shape=same_as_input),
    "QUANTIZE": _r(1, 1, shape=same_as_input),
    "DENSIFY": _r(1, 1, checks=[same_dtype([0])], shape=same_as_input),
    "CAST": _r(1, 1, shape=same_as_input),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "FAKE_QUANT": ((1, 1), (1, 1)),
    "RFFT2D": ((2, 2), (1, 1)),
    "COMPLEX_ABS": ((1, 1), (1, 1)),
    "REAL": ((1, 1), (1, 1)),
    "IMAG": ((1, 1), (1, 1)),
    "BITCAST": ((1, 1), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "DEQUANTIZE": ("f16 i16 i8 u8", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
SYMBOLIC_VALUES: dict[str, Callable[[OpView], list | None]] = {
    "CAST": lambda v: v.ints(0) if v.tensor(0).dtype.kind in "iu" else None}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "DEQUANTIZE": lambda op, g: [dequantize(g.tensors[op.inputs[0]])],
    "DENSIFY": lambda op, g: [densify(g.tensors[op.inputs[0]], g.tensors[op.outputs[0]].shape)],
    "CAST": lambda op, g: [_val(g, op, 0).astype(g.tensors[op.outputs[0]].dtype)],
}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


builtin("QUANTIZE", "DEQUANTIZE", "DENSIFY")(lambda n: [n.x()])  # values are real numbers already
builtin("CAST")(lambda n: [n.x()])  # the executor converts to the output's type (reference.py _as_declared)
