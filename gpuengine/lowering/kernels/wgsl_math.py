"""WGSL math helpers shared by kernels: functions whose accuracy the adapter's builtins do not guarantee.

Each helper is a file, shaders/include/math/<name>.wgsl, whose comment says why it is written as it is. A kernel's
expression names them (`exp4(`, `tanh4(`, ...); `helpers_for` returns the definitions it needs, dependencies first,
so each kernel's text carries only the helpers it calls.
"""

from __future__ import annotations

from .. import codegen

EXP = codegen.snippet("math/exp4.wgsl")
EXPM1 = codegen.snippet("math/expm1_4.wgsl")  # exp(x) - 1 without cancellation near 0
ERF = codegen.snippet("math/erf4.wgsl")  # calls exp4
TANH = codegen.snippet("math/tanh4.wgsl")  # calls expm1_4
POW = codegen.snippet("math/pow4.wgsl")  # std::pow semantics
TURNS = codegen.snippet("math/turns4.wgsl")  # the argument reduction of sin / cos
# LiteRT's integer output stage (kernels/common.py): exact int8 FULLY_CONNECTED, BATCH_MATMUL and convs call it in
# their epilogues, int8 ADD / SUB in their expression
MULTIPLY_BY_QUANTIZED_MULTIPLIER = codegen.snippet("math/multiply_by_quantized_multiplier.wgsl")
SINGLE_ROUNDING_MULTIPLY = codegen.snippet("math/single_rounding_multiply.wgsl")  # int8 ADD / SUB's input scaling
# name -> definition; a definition may call those listed before it
HELPERS = {"exp4(": EXP, "expm1_4(": EXPM1, "erf4(": ERF, "tanh4(": TANH, "pow4(": POW, "turns4(": TURNS,
           "multiply_by_quantized_multiplier(": MULTIPLY_BY_QUANTIZED_MULTIPLIER,
           "single_rounding_multiply(": SINGLE_ROUNDING_MULTIPLY}


def helpers_for(*texts: str) -> list[str]:
    """The helper definitions the texts call, each once, every one after the helpers it calls."""
    needed: set[str] = set()
    pending = list(texts)
    while pending:
        text = pending.pop()
        for key, code in HELPERS.items():
            if key in text and key not in needed:
                needed.add(key)
                pending.append(code)
    return [code for key, code in HELPERS.items() if key in needed]
