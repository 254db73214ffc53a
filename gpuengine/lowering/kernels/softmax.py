"""SOFTMAX (beta), LOG_SOFTMAX and L2_NORMALIZATION over the last axis, which PHWC4 always stores as channels.

These are per-pixel channel reductions: a tile is one pixel and its C/4 slices (numerically stable max
subtraction), so a segmentation head with 2 channels and 65k pixels runs 65k short invocations rather than
looping over pixels. When the channel count is large (e.g. 1000 classes at 1x1), `split` invocations share a
pixel's slices and combine max and sum (kernels/tiling.py; a big GPU splits, a CPU adapter need not).

An int8 SOFTMAX computes as LiteRT's builtin kernel (optimized_ops::Softmax on x86, as measured against LiteRT
2.3.0): exp(-input_scale * beta * (max - q)) from a 256-entry f32 table (expf), summed in f32 in channel order (one
invocation per pixel), probabilities table / (sum * 1/256) rounded half away from zero: LiteRT's integers exactly.
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op, Tensor
from ...model.quantization import QUANTIZED_TYPES, is_quantized
from .. import codegen
from ..codegen import literal
from ..layout import slices
from . import tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering
from .common import bhwc, float_tensors
from .reduce import FLT_MAX
from .wgsl_math import helpers_for

L2_EPSILON = 1e-6  # TFLite's l2norm kernel: x / max(sqrt(sum x^2), 1e-6)


INT8_OUTPUT = (1.0 / 256.0, -128)  # the output scale and zero point LiteRT requires of an int8 SOFTMAX

EXP_LUT = Code(codegen.snippet("softmax/exp_lut.wgsl"))  # exp of the distances below the row's maximum, from a table


def int8_lut(op: Op, graph: Graph) -> bool:
    """An int8 -> int8 SOFTMAX with the output grid LiteRT requires (1/256, -128): LiteRT's table computation."""
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if op.code != "SOFTMAX" or x.dtype != np.int8 or out.dtype != np.int8 \
            or not (is_quantized(x) and is_quantized(out)):
        return False
    q = out.quantization
    return (float(q.scale[0]), int(q.zero_point[0]) if q.zero_point.size else 0) == INT8_OUTPUT  # type: ignore


def exp_table(x: Tensor, beta: float) -> np.ndarray:
    """LiteRT's PopulateSoftmaxLookupTable, indexed by the distance d = max - q: expf(-input_scale * beta * d) with
    the product in f32 (exp correctly rounded to f32; glibc's expf gives the same table on the encoder's scales)."""
    scale = np.float32(-np.float32(x.quantization.scale[0]) * np.float32(beta))  # type: ignore[union-attr]
    arguments = scale * np.arange(256, dtype=np.float32)
    return np.exp(arguments.astype(np.float64)).astype(np.float32)


def _math(op: Op, graph: Graph) -> dict[str, Code | bool]:
    """SUM_TERM(v, mx) summed over channels (ACCUMULATE), PREPARE (uses `total`), OUT(v) per vec4."""
    if int8_lut(op, graph):
        inverse = literal(1.0 / float(graph.tensors[op.inputs[0]].quantization.scale[0]))  # type: ignore[union-attr]
        term = f"exp_lut(round((vec4<f32>(mx) - v) * {inverse}))"  # the table at max - q
        return {"NEEDS_MAX": True, "SUM_TERM": Code(term), "ACCUMULATE": Code("acc.x = acc.x + t.x + t.y + t.z + t.w;"),
                "PREPARE": Code(f"let inv_sum = 1.0 / (total * {literal(INT8_OUTPUT[0])});"),
                "OUT": Code(f"{term} * inv_sum * {literal(INT8_OUTPUT[0])}")}  # probability * 256 exactly, / 256
    if op.code == "SOFTMAX":
        beta = literal(float(op.opt("beta", 0.0) or 0.0))
        term = f"exp4((v - vec4<f32>(mx)) * {beta})"
        return {"NEEDS_MAX": True, "SUM_TERM": Code(term), "PREPARE": Code(""),
                "OUT": Code(f"{term} / total"), "ACCUMULATE": Code("acc += t;")}
    if op.code == "LOG_SOFTMAX":
        return {"NEEDS_MAX": True, "SUM_TERM": Code("exp4(v - vec4<f32>(mx))"), "ACCUMULATE": Code("acc += t;"),
                "PREPARE": Code("let lse = log(total);"), "OUT": Code("v - vec4<f32>(mx) - vec4<f32>(lse)")}
    return {"NEEDS_MAX": False, "SUM_TERM": Code("v * v"), "ACCUMULATE": Code("acc += t;"),
            "PREPARE": Code(f"let norm = max(sqrt(total), {literal(L2_EPSILON)});"), "OUT": Code("v / norm")}


class SoftmaxKernel:
    ops = ("SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 1 or len(op.outputs) != 1:
            return "expects 1 input and 1 output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        shape = graph.tensors[op.inputs[0]].shape
        if len(shape) == 0 or 0 in shape:
            return f"input shape {shape}: needs rank >= 1 and no empty axis"
        if tuple(graph.tensors[op.outputs[0]].shape) != tuple(shape):
            return "input and output shapes differ"
        if op.code == "L2_NORMALIZATION" and int(op.opt("fused_activation_function", 0) or 0) != 0:
            return "L2_NORMALIZATION with a fused activation (TFLite rejects it too)"
        return None

    def integer_requantize(self, op: Op, graph: Graph) -> Code | None:
        """int8 SOFTMAX: `value` is LiteRT's f32 probability * 256 (exact) / 256; round it half away from zero as
        std::round does (floor(p + 0.5) in f32 misrounds p just below one half), add the zero point, clamp."""
        if not int8_lut(op, graph):
            return None
        scale, zero = INT8_OUTPUT
        lo, hi = QUANTIZED_TYPES[np.dtype(np.int8)]
        return Code(f"{{ let p = value * {literal(1.0 / scale)}; let f = floor(p); "
                    f"let q = clamp(select(f, f + 1.0, p - f >= vec4<f32>(0.5)) + {literal(float(zero))}, "
                    f"vec4<f32>({literal(float(lo))}), vec4<f32>({literal(float(hi))})); "
                    f"value = (q - {literal(float(zero))}) * {literal(scale)}; }}")

    def build(self, op: Op, graph: Graph) -> Lowering:
        b, h, w, c = bhwc(graph, op.inputs[0])
        s = slices(c)
        rem = c % 4
        mask = ", ".join("true" if (rem == 0 or k < rem) else "false" for k in range(4))
        math = _math(op, graph)
        lut = int8_lut(op, graph)
        fixed: dict = {"S": s, "H": h, "W": w, "BATCH_LAST": b - 1, "LAST_MASK": Code(f"vec4<bool>({mask})"),
                       "LOWEST": Code(literal(-FLT_MAX)), **{k: v for k, v in math.items() if k != "NEEDS_MAX"}}
        bindings = [Binding("src", tensor=op.inputs[0]), Binding("dst", tensor=op.outputs[0], writable=True)]
        tiles = b * h * w
        functions = [Code(f) for f in helpers_for(str(math["SUM_TERM"]))]
        if lut:  # LiteRT's table; one invocation per pixel sums in channel order (reduction 1: no split)
            table = exp_table(graph.tensors[op.inputs[0]], float(op.opt("beta", 0.0) or 0.0))
            bindings.insert(1, Binding("exp_table", data=table, element="vec4<f32>"))
            functions.append(EXP_LUT)

        def make(d: Decomposition) -> KernelSpec:
            shared, dispatch = tiling.split_params(d, tiles, ["m"], "max({a}, {b})")
            max_pass = Code("")
            if math["NEEDS_MAX"]:
                max_pass = codegen.fill("softmax/max_pass.wgsl", {"S": s, "SPLIT": d.split, "S_LAST": s - 1,
                                        "LOWEST": Code(literal(-FLT_MAX)), "REDUCE": shared["REDUCE"]}, "  ")
            params = {**fixed, **shared, "MAX_PASS": max_pass,
                      "REDUCE_SUM": codegen.lane_reduce(["acc"], d, first=not math["NEEDS_MAX"])}
            return KernelSpec("softmax", params, bindings, grid=(tiles * d.split, 1, 1), functions=functions,
                              workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch, out_channels=c,
                              label=f"{op.code}{' (int8: LiteRT table)' if lut else ''} [{d.describe()}]")

        passes = 3 if math["NEEDS_MAX"] else 2  # each reads a slice; exp or a square, a sum, a division
        return [tiling.variants("softmax", {"S": s, "H": h, "W": w, "B": b, "C": c}, [(1, 1)], 1 if lut else s,
                                lambda _: tiles,
                                lambda _: passes * (tiling.LOAD + 16), make, b * h * w * c,
                                [str(v) for k, v in math.items() if k != "ACCUMULATE"])]


KERNEL = SoftmaxKernel()
