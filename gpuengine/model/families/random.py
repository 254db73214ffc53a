"""Random ops (validated; never folded, no reference): what each op means.

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
    finish_rules,
    registrar,
)

NAME = "random"
CODES: tuple[str, ...] = (
    "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL")


# -- validation and shape rules ---------------------------------------------------------------------------------------
RULES: dict[str, Rule] = {}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "MULTINOMIAL": ((2, 2), (1, 1)),
    "RANDOM_UNIFORM": ((1, 1), (1, 1)),
    "RANDOM_STANDARD_NORMAL": ((1, 1), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"RANDOM_UNIFORM": 3, "RANDOM_STANDARD_NORMAL": 3, "MULTINOMIAL": 3}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)
