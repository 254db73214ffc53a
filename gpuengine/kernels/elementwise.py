"""Unary and binary elementwise ops (with numpy-style broadcasting) on PHWC4 vec4s.

Each op is one WGSL expression over `a` (and `b`); the template reads operands through generated functions
so broadcasting and constant operands cost nothing at run time.
"""

from __future__ import annotations

from ..codegen import literal
from ..layout import slices
from ..model.ir import Graph, Op
from .base import Binding, Code, KernelSpec, Lowering
from .common import activation, activation_supported, bhwc, broadcastable, float_tensors, operand

_ERF = ("fn erf4(x: vec4<f32>) -> vec4<f32> {\n"  # Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
        "  let t = 1.0 / (1.0 + 0.3275911 * abs(x));\n"
        "  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t"
        " + 0.254829592) * t * exp(-x * x);\n"
        "  return sign(x) * y;\n}\n")
_TANH = "fn tanh4(x: vec4<f32>) -> vec4<f32> {\n  let e = exp(-2.0 * abs(x));\n  return sign(x) * (1.0 - e) / (1.0 + e);\n}\n"

UNARY = {
    "ABS": "abs(a)", "CEIL": "ceil(a)", "COS": "cos(a)", "EXP": "exp(a)", "FLOOR": "floor(a)",
    "ELU": "select(exp(a) - 1.0, a, a > vec4<f32>(0.0))",
    "HARD_SWISH": "a * clamp(a + 3.0, vec4<f32>(0.0), vec4<f32>(6.0)) * (1.0 / 6.0)",
    "LOG": "log(a)", "LOGISTIC": "1.0 / (1.0 + exp(-a))", "NEG": "-a",
    "RELU": "max(a, vec4<f32>(0.0))", "RELU6": "clamp(a, vec4<f32>(0.0), vec4<f32>(6.0))",
    "RELU_N1_TO_1": "clamp(a, vec4<f32>(-1.0), vec4<f32>(1.0))",
    "RELU_0_TO_1": "clamp(a, vec4<f32>(0.0), vec4<f32>(1.0))",
    "RSQRT": "inverseSqrt(a)", "SIN": "sin(a)", "SQRT": "sqrt(a)", "SQUARE": "a * a",
    "TANH": "tanh4(a)",  # exp form: WGSL tanh can return NaN for large inputs
    "LEAKY_RELU": "select(a * ${ALPHA}, a, a >= vec4<f32>(0.0))",
    "GELU": "GELU",  # chosen by the `approximate` option below
}
BINARY = {
    "ADD": "a + b", "SUB": "a - b", "MUL": "a * b", "DIV": "a / b",
    "MAXIMUM": "max(a, b)", "MINIMUM": "min(a, b)", "SQUARED_DIFFERENCE": "(a - b) * (a - b)",
    "FLOOR_DIV": "floor(a / b)", "FLOOR_MOD": "a - b * floor(a / b)",
    "POW": "select(pow(abs(a), b), select(pow(abs(a), b), -pow(abs(a), b), abs(b % vec4<f32>(2.0)) == vec4<f32>(1.0)),"
           " a < vec4<f32>(0.0))",
    "PRELU": "select(a * b, a, a >= vec4<f32>(0.0))",
}
_GELU_EXACT = "0.5 * a * (1.0 + erf4(a * 0.7071067811865476))"
_GELU_TANH = "0.5 * a * (1.0 + tanh4(0.7978845608028654 * (a + 0.044715 * a * a * a)))"


class ElementwiseKernel:
    ops = tuple(UNARY) + tuple(BINARY)

    def supports(self, op: Op, graph: Graph) -> str | None:
        arity = 1 if op.code in UNARY else 2
        if len(op.inputs) != arity or len(op.outputs) != 1:
            return f"expects {arity} input(s) and 1 output"
        reason = float_tensors(op, graph) or activation_supported(op)
        if reason:
            return reason
        out = graph.tensors[op.outputs[0]].shape
        for t in op.inputs:
            if graph.tensors[t].data is None and graph.tensors[t].shape != out and arity == 1:
                return "input and output shapes differ"
        if arity == 2:
            a, b = (graph.tensors[t].shape for t in op.inputs)
            if not broadcastable(a, b, out):
                return f"shapes {a} and {b} do not broadcast to {out}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        out_t = op.outputs[0]
        out_shape = graph.tensors[out_t].shape
        b, h, w, c = bhwc(graph, out_t)
        readers, bindings, body = [], [], []
        for name, t in zip("ab", op.inputs):
            shape = graph.tensors[t].shape
            padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
            fn, binds = operand(graph, t, (b, h, w, c), name, padded)
            readers.append(fn)
            bindings += binds
            body.append(f"let {name} = read_{name}(ob, oy, ox, os);")
        expr = UNARY.get(op.code) or BINARY[op.code]
        if op.code == "GELU":
            expr = _GELU_TANH if op.opt("approximate", False) else _GELU_EXACT
        if op.code == "LEAKY_RELU":
            expr = expr.replace("${ALPHA}", literal(float(op.opt("alpha", 0.2))))
        readers = [_ERF, _TANH, *readers]
        body.append(f"var value = {expr};")
        return [KernelSpec(
            "elementwise",
            {"S": slices(c), "H": h, "W": w, "READERS": Code("\n".join(readers)), "BODY": Code("\n  ".join(body))},
            [*bindings, Binding("dst", tensor=out_t, writable=True)],
            grid=(w, h, b * slices(c)), epilogue=activation(op), out_channels=c, label=op.code,
        )]


KERNEL = ElementwiseKernel()
