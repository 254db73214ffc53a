"""What every op means, found from one place: its op family's module, one row per op code here.

An op's meaning is four rules, side by side in its family's module (gpuengine/model/families/<family>.py):
- validation rule: input / output counts, checks, options table, element types (RULES, COUNTS, TYPES);
- shape rule: the output shapes for given input shapes: the validation rule's `shape`, or the family's
  OWN_SHAPE_RULES (RESHAPE, FULLY_CONNECTED and the MediaPipe custom ops read more than the rule's view);
  WHILE, IF and STABLEHLO_COMPOSITE propagate into their subgraphs (model/shapes.py called_shapes);
- constant-folding evaluator: its value with numpy when all inputs are constants (FOLDERS);
- float64 reference: what the GPU result is measured against (BUILTIN_OPS / CUSTOM_OPS, @builtin / @custom).
model/validate.py, model/shapes.py, model/folding.py and reference.py run the merged tables. The kernel that lowers
an op to WGSL is not op meaning: lowering/kernels/registry.py finds it.

    python -m gpuengine.op_table CONV_2D      # where each of CONV_2D's rules is defined
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .model import families, ops, shapes
from .model.validate import Rule

# Op codes by family: what a newcomer looks for first. Every code with a rule, evaluator or reference is in one.
FAMILIES: dict[str, tuple[str, ...]] = {module.NAME: module.CODES for module in families.MODULES}


@dataclass(frozen=True)
class OpMeaning:
    """The four rules of one op code (None: the op has none of that kind; a fused op is checked by its kernel)."""

    code: str
    family: str
    module: str  # the family's module, where the four rules are (gpuengine.model.families.<family>)
    validation: Rule | None
    shape: Callable[..., Any] | None
    folding: Callable[..., Any] | None
    reference: Callable[..., Any] | None


def _build() -> dict[str, OpMeaning]:
    table: dict[str, OpMeaning] = {}
    for module in families.MODULES:
        for code in module.CODES:
            if code in table:
                raise RuntimeError(f"op {code} is in two families")
            rule = module.RULES.get(code)
            shape = (module.OWN_SHAPE_RULES.get(code)
                     or (shapes.called_shapes if code in shapes.SUBGRAPH_OPS else None)
                     or (rule.shape if rule is not None else None))
            table[code] = OpMeaning(code, module.NAME, module.__name__, rule, shape, module.FOLDERS.get(code),
                                    module.BUILTIN_OPS.get(code) or module.CUSTOM_OPS.get(code))
    return table


TABLE: dict[str, OpMeaning] = _build()


def _where(entry: Any) -> str:
    if entry is None:
        return "-"
    return f"{entry.__module__}.{getattr(entry, '__qualname__', type(entry).__name__)}"


def describe(code: str) -> str:
    """Where each of an op's rules is defined, one line each."""
    m = TABLE[code]
    checks = ", ".join(dict.fromkeys(c.__qualname__.split(".<locals>")[0] for c in m.validation.checks)) \
        if m.validation is not None else ""
    where = m.module.removeprefix("gpuengine.").replace(".", "/") + ".py"
    validation = f"RULES[{code!r}] (checks: {checks or 'counts only'})" if m.validation else "-"
    fused = " (fused op, made by a pass: its kernel's supports() checks it)" if code in ops.FUSED_OPS else ""
    return "\n".join([f"{code} ({m.family}: {where}){fused}", f"  validation: {validation}",
                      f"  shape:      {_where(m.shape)}",
                      f"  folding:    {_where(m.folding)}", f"  reference:  {_where(m.reference)}"])


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(TABLE):
        print(describe(name))
