"""What every op means, found from one place: one row per op code, grouped by op family.

An op's meaning is four rules, each kept beside its siblings of the same kind:
- validation rule: input / output counts, checks, options table (model/validate.py RULES);
- shape rule: the output shapes for given input shapes: the validation rule's `shape`, or one of shapes.py's own
  (model/shapes.py, for RESHAPE, FULLY_CONNECTED and the MediaPipe custom ops);
- constant-folding evaluator: its value with numpy when all inputs are constants (model/folding.py FOLDERS);
- float64 reference: what the GPU result is measured against (gpuengine/reference.py BUILTIN_OPS / CUSTOM_OPS).
The kernel that lowers it to WGSL is not op meaning: kernels/registry.py finds it.

    python -m gpuengine.op_table CONV_2D      # where each of CONV_2D's rules is defined
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .model import ops, shapes
from .model.folding import FOLDERS
from .model.validate import RULES, Rule
from .reference import BUILTIN_OPS, CUSTOM_OPS

# Op codes by family: what a newcomer looks for first. Every code with a rule, evaluator or reference is in one.
FAMILIES: dict[str, tuple[str, ...]] = {
    "elementwise": (
        "ABS", "ADD", "ADD_N", "ATAN2", "BITWISE_XOR", "CEIL", "COS", "DIV", "ELU", "EXP", "FLOOR", "FLOOR_DIV",
        "FLOOR_MOD", "GELU", "HARD_SWISH", "LEAKY_RELU", "LOG", "LOGISTIC", "MAXIMUM", "MINIMUM", "MUL", "NEG", "POW",
        "PRELU", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "RIGHT_SHIFT", "ROUND", "RSQRT", "SIGN", "SIN",
        "SQRT", "SQUARE", "SQUARED_DIFFERENCE", "SUB", "TANH", ops.ELEMENTWISE_TREE),
    "compare and select": (
        "EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "LOGICAL_AND", "LOGICAL_NOT",
        "LOGICAL_OR", "SELECT", "SELECT_V2", "WHERE"),
    "convolution and matmul": (
        "CONV_2D", "CONV_3D", "CONV_3D_TRANSPOSE", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "Convolution2DTransposeBias",
        "FULLY_CONNECTED", "BATCH_MATMUL"),
    "pooling": ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D", "MaxPoolingWithArgmax2D", "MaxUnpooling2D"),
    "reduction": (
        "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ALL", "REDUCE_ANY", "ARG_MAX", "ARG_MIN",
        "CUMSUM", "SEGMENT_SUM", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN", "UNSORTED_SEGMENT_PROD",
        "UNSORTED_SEGMENT_SUM", "TOPK_V2"),
    "normalization": (
        "SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION", "LOCAL_RESPONSE_NORMALIZATION", ops.LAYER_NORM, ops.RMS_NORM),
    "shape and layout": (
        "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "CONCATENATION", "PACK", "UNPACK", "SPLIT", "SPLIT_V",
        "SLICE", "STRIDED_SLICE", "TILE", "BROADCAST_TO", "PAD", "PADV2", "MIRROR_PAD", "SPACE_TO_DEPTH",
        "DEPTH_TO_SPACE", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "REVERSE_V2", "REVERSE_SEQUENCE",
        "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "MATRIX_DIAG", "MATRIX_SET_DIAG"),
    "shape values": ("SHAPE", "RANK", "FILL", "RANGE", "ZEROS_LIKE", "BROADCAST_ARGS", "ONE_HOT"),
    "gather and index": ("GATHER", "GATHER_ND", "EMBEDDING_LOOKUP", "SCATTER_ND", "DYNAMIC_UPDATE_SLICE", "UNIQUE"),
    "attention and language models": (ops.ATTENTION, ops.KV_CACHE_WRITE, ops.ROPE),
    "quantization and types": (
        "QUANTIZE", "DEQUANTIZE", "FAKE_QUANT", "CAST", "BITCAST", "DENSIFY", "COMPLEX_ABS", "REAL", "IMAG", "RFFT2D"),
    "control flow and state": (
        "WHILE", "IF", "CALL_ONCE", "STABLEHLO_COMPOSITE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"),
    "random": ("RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL"),
    "recurrent and detection (validated, left to LiteRT)": (
        "BIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_RNN", "UNIDIRECTIONAL_SEQUENCE_RNN", "LSH_PROJECTION",
        "SKIP_GRAM", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5"),
    "MediaPipe landmarks": (
        "Landmarks2TransformMatrix", "TransformLandmarks", "TransformTensor", "TransformTensorBilinear"),
}


@dataclass(frozen=True)
class OpMeaning:
    """The four rules of one op code (None: the op has none of that kind; a fused op is checked by its kernel)."""

    code: str
    family: str
    validation: Rule | None
    shape: Callable[..., Any] | None
    folding: Callable[..., Any] | None
    reference: Callable[..., Any] | None


def _build() -> dict[str, OpMeaning]:
    table: dict[str, OpMeaning] = {}
    for family, codes in FAMILIES.items():
        for code in codes:
            if code in table:
                raise RuntimeError(f"op {code} is in two families")
            rule = RULES.get(code)
            shape = (shapes.OWN_SHAPE_RULES.get(code) or (shapes.called_shapes if code in shapes.SUBGRAPH_OPS else None)
                     or (rule.shape if rule is not None else None))
            table[code] = OpMeaning(code, family, rule, shape, FOLDERS.get(code),
                                    BUILTIN_OPS.get(code) or CUSTOM_OPS.get(code))
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
    validation = f"model/validate.py RULES[{code!r}] (checks: {checks or 'counts only'})" if m.validation else "-"
    fused = " (fused op, made by a pass: its kernel's supports() checks it)" if code in ops.FUSED_OPS else ""
    return "\n".join([f"{code} ({m.family}){fused}", f"  validation: {validation}", f"  shape:      {_where(m.shape)}",
                      f"  folding:    {_where(m.folding)}", f"  reference:  {_where(m.reference)}"])


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(TABLE):
        print(describe(name))
