"""Control flow (WHILE, IF, CALL_ONCE, composites) and resource variables: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Op
from ._common import (
    _ANY,
    Fn,
    OpView,
    Rule,
    finish_rules,
    options_present,
    registrar,
)

NAME = "control flow and state"
CODES: tuple[str, ...] = (
    "WHILE", "IF", "CALL_ONCE", "STABLEHLO_COMPOSITE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE")


# -- validation and shape rules ---------------------------------------------------------------------------------------
# Subgraph calls: arity and references are checked against the callee in validate.py's _check_calls.
RULES: dict[str, Rule] = {
    "CALL_ONCE": Rule((0, 0), (0, 0), checks=(options_present,), options="CallOnceOptions"),
    "WHILE": Rule((1, None), (1, None), optional=_ANY, checks=(options_present,), options="WhileOptions"),
    "IF": Rule((1, None), (0, None), optional=_ANY, checks=(options_present,), options="IfOptions"),
    "STABLEHLO_COMPOSITE": Rule((0, None), (1, None), optional=_ANY, checks=(options_present,),
                                options="StableHLOCompositeOptions"),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "VAR_HANDLE": ((0, 0), (1, 1)),
    "READ_VARIABLE": ((1, 1), (1, 1)),
    "ASSIGN_VARIABLE": ((2, 2), (0, 0)),
    "CALL_ONCE": ((0, 0), (0, 0)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"WHILE": 4, "IF": 4}  # which subgraph runs, and how often, is decided by the run


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)
