"""Recurrent and detection ops (validated, left to LiteRT): what each op means.

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
    OpView,
    Rule,
    dtype_in,
    finish_rules,
    registrar,
)

NAME = "recurrent and detection (validated, left to LiteRT)"
CODES: tuple[str, ...] = (
    "BIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_RNN", "UNIDIRECTIONAL_SEQUENCE_RNN", "LSH_PROJECTION",
    "SKIP_GRAM", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5")


# -- validation and shape rules ---------------------------------------------------------------------------------------
RULES: dict[str, Rule] = {
    "SKIP_GRAM": Rule((1, 1), (1, 1), checks=(dtype_in(0, frozenset({np.dtype(object)}), "a string"),)),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "NON_MAX_SUPPRESSION_V4": ((5, 5), (2, 2)),
    "NON_MAX_SUPPRESSION_V5": ((6, 6), (3, 3)),
    "BIDIRECTIONAL_SEQUENCE_RNN": ((12, 12), (1, 2)),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ((5, 5), (1, 1)),
    "BIDIRECTIONAL_SEQUENCE_LSTM": ((48, 48), (1, 2)),
    "LSH_PROJECTION": ((2, 3), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"NON_MAX_SUPPRESSION_V4": 4, "NON_MAX_SUPPRESSION_V5": 4}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)
