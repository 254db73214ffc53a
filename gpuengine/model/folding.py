"""Constant-folding evaluators: an op's value computed with numpy when all its inputs are constants. Each op's
evaluator is in its family module (model/families/<family>.py FOLDERS); FOLDERS here is all of them.

passes/fold_constants.py applies them at load (and falls back to LiteRT's CPU kernels for ops not here);
model/shapes.py uses them to propagate values that decide shapes (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .families import merged
from .ir import Graph, Op

# Never folded: state, randomness, control flow and resources have no single value to bake.
NEVER_FOLDED = {"RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL", "VAR_HANDLE", "READ_VARIABLE",
          "ASSIGN_VARIABLE", "CALL_ONCE", "WHILE", "IF", "CALL", "HASHTABLE", "HASHTABLE_FIND",
          "HASHTABLE_IMPORT", "HASHTABLE_SIZE", "RANDOM_SHUFFLE"}

FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = merged("FOLDERS")
