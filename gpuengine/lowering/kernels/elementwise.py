"""Unary and binary elementwise ops (with numpy-style broadcasting) on PHWC4 vec4s.

Each op is one WGSL expression over `a` (and `b`); the template reads operands through generated functions
so broadcasting and constant operands cost nothing at run time. `elementwise_spec` is shared with the
comparison/select kernels (kernels/select.py), which are elementwise too.

ELEMENTWISE_TREE is internal (passes/fuse_elementwise_tree.py): a whole tree of these ops over one run-time
tensor x (input 0) and constant leaves, kept as Steps (kernels/prologue.py) in its option `tree`. It runs in the
epilogue of x's producer, or else as one dispatch.
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op, Tensor
from ...model.ops import ELEMENTWISE_TREE as TREE
from ...model.ops import TREE_OPTION
from ...model.quantization import is_quantized
from ..codegen import literal
from ..layout import slices
from .base import Binding, Code, Epilogue, KernelSpec, Lowering
from .common import (
    CLAMPED_ACTIVATIONS,
    activation,
    activation_range,
    activation_supported,
    bhwc,
    broadcastable,
    float_tensors,
    integer_requant,
    keep_nan,
    operand,
    quantize_multiplier,
)
from .prologue import input_reader, prologue_reason, tree_function
from .wgsl_math import helpers_for

# No intermediate may overflow where the result does not (found on an NVIDIA H100 with inputs +-1e30, 3e38):
# 1 / (1 + exp(-a)) divides by inf for a << 0, which a GPU's fast division may turn into NaN, so LOGISTIC takes
# e = exp(-|a|) in (0, 1] and divides e (a < 0) or 1 by 1 + e in [1, 2]; HARD_SWISH scales the clamp to [0, 1]
# before multiplying by a (a * 6 overflows for a > 5.7e37, where LiteRT's result is a). exp is exp4 (wgsl_math.py).
_LOGISTIC = "select(exp4(-abs(a)), vec4<f32>(1.0), a >= vec4<f32>(0.0)) / (1.0 + exp4(-abs(a)))"
_HARD_SWISH = "a * (clamp(a + 3.0, vec4<f32>(0.0), vec4<f32>(6.0)) * (1.0 / 6.0))"

UNARY = {
    "ABS": "abs(a)", "CEIL": "ceil(a)", "COS": "cos(turns4(a))", "EXP": "exp4(a)", "FLOOR": "floor(a)",
    "ELU": "select(expm1_4(a), a, a > vec4<f32>(0.0))",
    "HARD_SWISH": _HARD_SWISH,
    "LOG": "log(a)", "LOGISTIC": _LOGISTIC, "NEG": "-a",
    "RELU": keep_nan("max(a, vec4<f32>(0.0))", "a"), "RELU6": keep_nan("clamp(a, vec4<f32>(0.0), vec4<f32>(6.0))", "a"),
    "RELU_N1_TO_1": keep_nan("clamp(a, vec4<f32>(-1.0), vec4<f32>(1.0))", "a"),
    "RELU_0_TO_1": keep_nan("clamp(a, vec4<f32>(0.0), vec4<f32>(1.0))", "a"),
    "RSQRT": "inverseSqrt(a)", "SIN": "sin(turns4(a))", "SQRT": "sqrt(a)", "SQUARE": "a * a",
    "TANH": "tanh4(a)",
    "LEAKY_RELU": "select(a * ${ALPHA}, a, a > vec4<f32>(0.0))",
    "GELU": "GELU",  # chosen by the `approximate` option below
}
BINARY = {
    "ADD": "a + b", "SUB": "a - b", "MUL": "a * b", "DIV": "a / b",
    "MAXIMUM": "max(a, b)", "MINIMUM": "min(a, b)", "SQUARED_DIFFERENCE": "(a - b) * (a - b)",
    "FLOOR_DIV": "floor(a / b)",
    "FLOOR_MOD": "a - b * floor(a / b)",  # sign of the divisor, as TFLite's fmod-then-adjust
    "POW": "pow4(a, b)",
    "PRELU": "select(a * b, a, a >= vec4<f32>(0.0))",
}
# Ops whose f32 arithmetic on int32 values is the integer result exactly (|x| < 2^24, kernels/common.py
# EXACT_TYPES): index arithmetic of decoders (positions + 1, ...). Division and its kin are not exact in f32.
INTEGER_OPS = ("ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "ABS", "NEG", "SQUARE")
# CAST between float32, int32 and bool: to int32 truncates toward zero (C++ static_cast), to bool is != 0.
CASTS = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_))
_GELU_EXACT = "0.5 * a * (1.0 + erf4(a * 0.7071067811865476))"
# a * a * a overflows for |a| > 1e12, harmlessly: tanh4(+-inf) is exactly +-1 and 0.5 * a stays finite.
_GELU_TANH = "0.5 * a * (1.0 + tanh4(0.7978845608028654 * (a + 0.044715 * a * a * a)))"
_FUSED = ("ADD", "SUB", "MUL", "DIV")  # the ops whose options carry a fused activation


def elementwise_spec(op: Op, graph: Graph, operands: list[tuple[str, int, tuple[int, ...]]], expr: str,
                     epilogue: list[Code] | None = None) -> KernelSpec:
    """One dispatch computing `value = expr` per output vec4; operands are (name, tensor, logical shape)
    and are broadcast (numpy rules, right-aligned) to the op's first output."""
    out_t = op.outputs[0]
    out_shape = graph.tensors[out_t].shape
    b, h, w, c = bhwc(graph, out_t)
    readers, bindings, body = [], [], []
    for name, t, shape in operands:
        fn, binds = operand(graph, t, out_shape, name, shape, _zero_extended(op, shape, out_shape))
        readers.append(fn)
        bindings += binds
        body.append(f"let {name} = read_{name}(ob, oy, ox, os);")
    helpers = helpers_for(expr)
    body.append(f"var value = {expr};")
    return KernelSpec(
        "elementwise",
        {"S": slices(c), "H": h, "W": w, "READERS": Code("\n".join(helpers + readers)),
         "BODY": Code("\n  ".join(body))},
        [*bindings, Binding("dst", tensor=out_t, writable=True)],
        grid=(w, h, b * slices(c)), epilogue=epilogue or [], out_channels=c, label=op.code,
    )



def _int8_constant(tensor: Tensor) -> bool:
    """An int8 constant with one scale: the kernel reads its real values (q - zero point) * scale."""
    q = tensor.quantization
    return tensor.data is not None and q is not None and q.scale.size == 1 and float(q.scale[0]) > 0

class ElementwiseKernel:
    ops = (*UNARY, *BINARY, "CAST", TREE)
    internal_ops = (TREE,)  # made by a pass, never read from a model

    def supports(self, op: Op, graph: Graph) -> str | None:
        if op.code == TREE:
            return _tree_reason(op, graph)
        arity = 1 if op.code in UNARY or op.code == "CAST" else 2
        if len(op.inputs) != arity or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"expects {arity} input(s) and 1 output"
        if op.code == "CAST":
            return _cast_reason(op, graph)
        integers = all(graph.tensors[t].dtype == np.int32 for t in [*op.inputs, *op.outputs])
        if integers and op.code not in INTEGER_OPS:
            return f"{op.code} of int32 tensors is not exact in f32 (only {', '.join(INTEGER_OPS)} run on the GPU)"
        reason = float_tensors(op, graph, integers=integers) \
            or (activation_supported(op) if op.code in _FUSED else None)
        if reason:
            return reason
        out = graph.tensors[op.outputs[0]].shape
        if arity == 1 and graph.tensors[op.inputs[0]].shape != out:
            return "input and output shapes differ"
        if arity == 2:
            a, b = (graph.tensors[t].shape for t in op.inputs)
            if op.opt("zero_extend"):
                short = [s for s in (a, b) if s != out]
                if op.code not in ("ADD", "SUB") or len(short) != 1 or len(short[0]) != len(out) \
                        or short[0][:-1] != out[:-1] or short[0][-1] > out[-1] \
                        or graph.tensors[op.inputs[a != out]].data is not None:
                    return "zero_extend needs one tensor operand with fewer channels and otherwise the output's shape"
            elif not broadcastable(a, b, out):
                return f"shapes {a} and {b} do not broadcast to {out}"
            if op.code == "PRELU" and a != out:
                return f"PRELU output shape {out} differs from the input shape {a}"
        if op.code == "LEAKY_RELU" and not _finite(op.opt("alpha", 0.2)):
            return "non-finite alpha"
        return None

    @staticmethod
    def _expr(op: Op, graph: Graph | None = None) -> str:
        if op.code == "CAST":
            return _cast_expr(op, graph)
        if op.code in ("SQUARED_DIFFERENCE", "RSQRT", "ADD", "SUB") and graph is not None:
            integer = {"SQUARED_DIFFERENCE": _int8_squared_difference, "RSQRT": _int8_rsqrt, "ADD": _int8_add,
                       "SUB": _int8_add}[op.code](op, graph)
            if integer is not None:
                return integer
        expr = UNARY.get(op.code) or BINARY[op.code]
        if op.code == "GELU":
            expr = _GELU_TANH if op.opt("approximate", False) else _GELU_EXACT
        if op.code == "LEAKY_RELU":
            expr = expr.replace("${ALPHA}", literal(float(op.opt("alpha", 0.2))))
        return expr

    def _statements(self, op: Op, graph: Graph | None = None) -> tuple[list[Code], list[Code]]:
        """Statements setting `value` from operands `a` (and `b`), fused activation included, and the helper
        functions they call."""
        expr = self._expr(op, graph)
        helpers = [Code(code) for code in helpers_for(expr)]
        return [Code(f"value = {expr};"), *_activation(op, graph)], helpers

    def as_expression(self, op: Op) -> tuple[list[Code], list[Code]] | None:
        """The op evaluated inline by the kernel reading its output (kernels/prologue.py)."""
        return None if op.opt("zero_extend") or op.code in (TREE, "CAST") else self._statements(op)

    def as_epilogue(self, op: Op, graph: Graph, position: int, prefix: str) -> Epilogue | None:
        """The op applied to the producer's `value` (input `position`); other operands read directly."""
        if op.code == TREE:
            if position != 0:
                return None
            fn, helpers, bindings = tree_function(op, graph, f"{prefix}tree", TREE_OPTION)
            return Epilogue([Code(f"value = {prefix}tree(value, oi, ob, os);")], [*helpers, fn], bindings)
        out_shape = graph.tensors[op.outputs[0]].shape
        statements, functions = self._statements(op, graph)
        lines, bindings = [], []
        for k, (name, t) in enumerate(zip("ab", op.inputs)):
            if k == position:
                lines.append(f"let {name} = value;")
                continue
            shape = graph.tensors[t].shape
            fn, binds = operand(graph, t, out_shape, prefix + name, shape, _zero_extended(op, shape, out_shape))
            functions.append(fn)
            bindings += binds
            lines.append(f"let {name} = read_{prefix}{name}(ob, oy, ox, os);")
        return Epilogue([Code("{ " + " ".join(lines + statements) + " }")], functions, bindings)

    def integer_requantize(self, op: Op, graph: Graph) -> Code | None:
        """int8 MUL without a fused activation (of run-time tensors, or one and an int8 constant such as a
        LayerNorm's gamma) as LiteRT's integer kernel rounds it: the product of (q - zero point)s times
        QuantizeMultiplier(scale_x * scale_y / scale_out), MultiplyByQuantizedMultiplier's two roundings. None for
        other ops (fake_quant rounds them)."""
        if op.code != "MUL" or len(op.inputs) != 2 or int(op.opt("fused_activation_function", 0) or 0) != 0:
            return None
        tensors = [graph.tensors[t] for t in (*op.inputs, op.outputs[0])]
        if any(t.dtype != np.int8 or not (is_quantized(t) or _int8_constant(t)) for t in tensors):
            return None
        unit = float(tensors[0].quantization.scale[0]) * float(tensors[1].quantization.scale[0])  # type: ignore
        multiplier, shift = quantize_multiplier(unit / float(tensors[2].quantization.scale[0]))  # type: ignore
        return integer_requant(tensors[2], unit, multiplier, shift)

    def build(self, op: Op, graph: Graph) -> Lowering:
        if op.code == TREE:
            return [_tree_spec(op, graph)]
        expr = self._expr(op, graph)
        operands = [(name, t, graph.tensors[t].shape) for name, t in zip("ab", op.inputs)]
        epilogue = _activation(op, graph)
        return [elementwise_spec(op, graph, operands, expr, epilogue)]


def _cast_reason(op: Op, graph: Graph) -> str | None:
    src, dst = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if src.dtype not in CASTS or dst.dtype not in CASTS or src.quantization is not None \
            or dst.quantization is not None:
        return f"CAST from {src.dtype} to {dst.dtype} (the GPU casts between float32, int32 and bool)"
    if src.shape != dst.shape:
        return "input and output shapes differ"
    return float_tensors(op, graph, integers=True)


def _cast_expr(op: Op, graph: Graph | None) -> str:
    if graph is None:
        raise ValueError("CAST needs the graph for its types")
    src, dst = graph.tensors[op.inputs[0]].dtype, graph.tensors[op.outputs[0]].dtype
    if dst == np.bool_:
        return "select(vec4<f32>(0.0), vec4<f32>(1.0), a != vec4<f32>(0.0))"
    if dst == np.int32 and src == np.float32:
        return "trunc(a)"
    return "a"


def _tree_reason(op: Op, graph: Graph) -> str | None:
    if len(op.outputs) != 1 or not op.inputs or min(op.inputs) < 0:
        return f"{TREE} expects x and its leaves as inputs and 1 output"
    reason = float_tensors(op, graph) or prologue_reason(op, graph, 1, TREE_OPTION)
    if reason:
        return reason
    if graph.tensors[op.outputs[0]].shape != graph.tensors[op.inputs[0]].shape:
        return f"{TREE} output shape differs from its input 0"
    return None


def _tree_spec(op: Op, graph: Graph) -> KernelSpec:
    """The tree as one dispatch (x has no producer that takes it as an epilogue): load x through the tree."""
    out_t = op.outputs[0]
    b, h, w, c = bhwc(graph, out_t)
    reader, bindings, _ = input_reader(op, graph, "src", TREE_OPTION)
    label = f"{TREE}(" + "+".join(step.op.code for step in op.opt(TREE_OPTION)) + ")"
    return KernelSpec(
        "elementwise",
        {"S": slices(c), "H": h, "W": w, "READERS": reader, "BODY": Code("var value = load_src(oi, ob, os);")},
        [*bindings, Binding("dst", tensor=out_t, writable=True)],
        grid=(w, h, b * slices(c)), out_channels=c, label=label,
    )


def _activation(op: Op, graph: Graph | None) -> list[Code]:
    """The fused activation applied to `value`; none where an exact int8 ADD / SUB clamps its integers."""
    if op.code not in _FUSED or (graph is not None and op.code in ("ADD", "SUB") and _int8_add(op, graph)):
        return []
    return activation(op)


def _int8_add(op: Op, graph: Graph) -> str | None:
    """int8 ADD / SUB as LiteRT's integer kernels compute them (add.cc, sub.cc): each input's (q - zero point)
    << 20 times QuantizeMultiplier(its scale / (2 * the larger scale)) rounded once (64-bit, ties up: as LiteRT
    2.3.0's x86 kernel does, measured), the two summed (or subtracted), times QuantizeMultiplier(2 * the larger
    scale / (2^20 * output scale)) with MultiplyByQuantizedMultiplier's two roundings (ties of the shift away from
    zero), plus the zero point, clamped to the fused activation's range; its real value. In exact i32 (wgsl_math).
    One rounding of the real sum misses LiteRT's integers on ~3 of 10^6 elements, TFLite's reference rounding of
    the inputs (twice) on ~1. None unless both inputs (run-time or constant) and the output are per-tensor int8."""
    tensors = [graph.tensors[t] for t in (*op.inputs, op.outputs[0])]
    if len(op.inputs) != 2 or any(t.dtype != np.int8 or not (is_quantized(t) or _int8_constant(t)) for t in tensors) \
            or int(op.opt("fused_activation_function", 0) or 0) not in CLAMPED_ACTIVATIONS:
        return None
    left = 20
    sa, sb, so = (float(t.quantization.scale[0]) for t in tensors)  # type: ignore[union-attr]
    zo = int(tensors[2].quantization.zero_point[0]) if tensors[2].quantization.zero_point.size else 0  # type: ignore
    twice = 2.0 * max(sa, sb)

    def stage(x: str, real: float) -> str:
        multiplier, shift = quantize_multiplier(real)
        return f"multiply_by_quantized_multiplier({x}, vec4<i32>({multiplier}), vec4<i32>({shift}), false)"

    def input_stage(name: str, scale: float) -> str:
        multiplier, shift = quantize_multiplier(scale / twice)  # <= 0.5: shift <= 0
        q = f"vec4<i32>(round({name} * {literal(1.0 / scale)})) * vec4<i32>({1 << left})"
        return f"single_rounding_multiply({q}, {multiplier}, {shift})"

    scaled = [input_stage(name, scale) for name, scale in (("a", sa), ("b", sb))]
    raw = f"{scaled[0]} {'+' if op.code == 'ADD' else '-'} {scaled[1]}"
    lo, hi = activation_range(op, tensors[2])
    q = f"clamp({stage(raw, twice / ((1 << left) * so))} + vec4<i32>({zo}), vec4<i32>({lo}), vec4<i32>({hi}))"
    return f"(vec4<f32>({q} - vec4<i32>({zo})) * {literal(so)})"


def _round_away(x: str) -> str:
    return f"(sign({x}) * floor(abs({x}) + 0.5))"


def _int8_squared_difference(op: Op, graph: Graph) -> str | None:
    """int8 SQUARED_DIFFERENCE as LiteRT's integer kernel computes it (squared_difference.cc): each input's
    (q - zero point) << 7 scaled by QuantizeMultiplier(its scale / (2 * the larger scale)) with
    MultiplyByQuantizedMultiplier's two roundings, the difference squared, times QuantizeMultiplier((2 * the
    larger scale)^2 / (2^14 * output scale)), rounded, plus the zero point, clamped; its real value. The one
    rounding of (a - b)^2 misses LiteRT's integers by a step on ~0.3% of elements. None unless a, b and the output
    are per-tensor int8."""
    tensors = [graph.tensors[t] for t in (*op.inputs, op.outputs[0])]
    if len(op.inputs) != 2 or any(t.dtype != np.int8 or not is_quantized(t) for t in tensors):
        return None
    (sa, sb, so), (zo,) = (float(t.quantization.scale[0]) for t in tensors), \
        (float(tensors[2].quantization.zero_point[0]),)  # type: ignore[union-attr]
    left = 7
    twice = 2.0 * max(sa, sb)
    scaled = []
    for name, scale in (("a", sa), ("b", sb)):
        multiplier, shift = quantize_multiplier(scale / twice)  # <= 0.5: shift <= 0, a right shift
        q = _round_away(f"{name} * {literal(1.0 / scale)}")
        high = _round_away(f"{q} * {literal(float(1 << left) * multiplier * 2.0 ** (max(shift, 0) - 31))}")
        scaled.append(_round_away(f"{high} * {literal(2.0 ** min(shift, 0))}"))
    multiplier, shift = quantize_multiplier(twice * twice / ((1 << 2 * left) * so))
    diff = f"({scaled[0]} - {scaled[1]})"
    out = _round_away(f"{diff} * {diff} * {literal(float(multiplier) * 2.0 ** (shift - 31))}")
    return f"(clamp({out} + {literal(zo)}, vec4<f32>(-128.0), vec4<f32>(127.0)) - {literal(zo)}) * {literal(so)}"


def _int8_rsqrt(op: Op, graph: Graph) -> str | None:
    """int8 RSQRT as LiteRT's integer kernel computes it (elementwise.cc): v = q - zero point, 1/sqrt(v) as a
    fixed-point multiplier applied to 2^20 (rounded: `data`), then data times QuantizeMultiplier(1 / sqrt(input
    scale) / output scale) shifted back by 20 with MultiplyByQuantizedMultiplier's two roundings, plus the zero
    point; v = 0 gives 127. In f32 with inverseSqrt for the fixed-point Newton iteration: 1 element in 66,000 off
    by a step over random scales where one rounding of the real 1/sqrt is off on 8 (checked on the host)."""
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if any(t.dtype != np.int8 or not is_quantized(t) for t in (x, out)):
        return None
    si, so = float(x.quantization.scale[0]), float(out.quantization.scale[0])  # type: ignore[union-attr]
    zo = float(out.quantization.zero_point[0])  # type: ignore[union-attr]
    multiplier, shift = quantize_multiplier(1.0 / np.sqrt(si) / so)
    left, right = max(shift - 20, 0), max(20 - shift, 0)
    v = _round_away(f"a * {literal(1.0 / si)}")
    data = _round_away(f"{literal(2.0 ** 20)} * inverseSqrt(max({v}, vec4<f32>(1.0)))")
    high = _round_away(f"{data} * {literal(float(multiplier) * 2.0 ** (left - 31))}")
    q = f"clamp({_round_away(f'{high} * {literal(2.0 ** -right)}')} + {literal(zo)}, vec4<f32>(-128.0), " \
        f"vec4<f32>(127.0))"
    return f"(select({q}, vec4<f32>(127.0), {v} <= vec4<f32>(0.0)) - {literal(zo)}) * {literal(so)}"


def _zero_extended(op: Op, shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """True for the operand of a merged channel PAD (see passes/merge_channel_pad.py)."""
    return bool(op.opt("zero_extend")) and tuple(shape) != tuple(out_shape)


def _finite(value: object) -> bool:
    try:
        return abs(float(value)) < float("inf")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


KERNEL = ElementwiseKernel()
