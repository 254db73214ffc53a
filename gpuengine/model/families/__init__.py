"""What each op means, one module per op family: for the family's op codes (CODES), the validation rules (RULES,
each with its shape rule; COUNTS and TYPES complete them), the shape rules that need more (OWN_SHAPE_RULES), the
constant-folding evaluators (FOLDERS) and the float64 references (BUILTIN_OPS / CUSTOM_OPS), side by side.

Adding an op = its family module (+ model/ops.py for a fused op) + its kernel + its shader: docs/adding-an-op.md.
model/validate.py, model/shapes.py, model/folding.py and gpuengine/reference.py run the merged tables.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from . import (
    attention,
    compare_select,
    control_flow,
    conv_matmul,
    elementwise,
    gather_index,
    mediapipe,
    normalization,
    pooling,
    quantization_types,
    random,
    recurrent_detection,
    reduction,
    shape_layout,
    shape_values,
)

MODULES: tuple[ModuleType, ...] = (
    elementwise, compare_select, conv_matmul, pooling, reduction, normalization, shape_layout, shape_values,
    gather_index, attention, quantization_types, control_flow, random, recurrent_detection, mediapipe)


# Tables a family has only when some of its ops need them (Rank and Dimension Propagation, model/symbolic.py):
# OP_CLASSES (SoD²'s operator class where it is not 2), SYMBOLIC_VALUES (values of shape-carrying tensors from
# symbolic inputs), EQUATIONS (what an op says its input and output sizes must satisfy: backward inference).
OPTIONAL_TABLES = ("OP_CLASSES", "SYMBOLIC_VALUES", "EQUATIONS")


def merged(table: str) -> dict[str, Any]:
    """One of the families' tables (RULES, OWN_SHAPE_RULES, FOLDERS, BUILTIN_OPS, CUSTOM_OPS and the optional
    ones) over all families."""
    out: dict[str, Any] = {}
    for module in MODULES:
        entries = getattr(module, table, {}) if table in OPTIONAL_TABLES else getattr(module, table)
        for code, entry in entries.items():
            if code in out:
                raise RuntimeError(f"op {code} has a {table} entry in two families")
            if code not in module.CODES:
                raise RuntimeError(f"op {code} has a {table} entry in {module.__name__} but is not in its CODES")
            out[code] = entry
    return out
