"""SOFTMAX (beta), LOG_SOFTMAX and L2_NORMALIZATION over the last axis, which PHWC4 always stores as channels.

These are per-pixel channel reductions: a tile is one pixel and its C/4 slices (numerically stable max
subtraction), so a segmentation head with 2 channels and 65k pixels runs 65k short invocations rather than
looping over pixels. When the channel count is large (e.g. 1000 classes at 1x1), `split` invocations share a
pixel's slices and combine max and sum (kernels/tiling.py; a big GPU splits, a CPU adapter need not).
"""

from __future__ import annotations

from .. import codegen
from ..codegen import literal
from ..layout import slices
from ..model.ir import Graph, Op
from . import tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering
from .common import bhwc, float_tensors
from .reduce import FLT_MAX
from .wgsl_math import helpers_for

L2_EPSILON = 1e-6  # TFLite's l2norm kernel: x / max(sqrt(sum x^2), 1e-6)


def _math(op: Op) -> dict[str, Code | bool]:
    """SUM_TERM(v, mx) summed over channels, PREPARE (uses `total`), OUT(v) per vec4."""
    if op.code == "SOFTMAX":
        beta = literal(float(op.opt("beta", 0.0) or 0.0))
        term = f"exp4((v - vec4<f32>(mx)) * {beta})"
        return {"NEEDS_MAX": True, "SUM_TERM": Code(term), "PREPARE": Code(""),
                "OUT": Code(f"{term} / total")}
    if op.code == "LOG_SOFTMAX":
        return {"NEEDS_MAX": True, "SUM_TERM": Code("exp4(v - vec4<f32>(mx))"),
                "PREPARE": Code("let lse = log(total);"), "OUT": Code("v - vec4<f32>(mx) - vec4<f32>(lse)")}
    return {"NEEDS_MAX": False, "SUM_TERM": Code("v * v"),
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

    def build(self, op: Op, graph: Graph) -> Lowering:
        b, h, w, c = bhwc(graph, op.inputs[0])
        s = slices(c)
        rem = c % 4
        mask = ", ".join("true" if (rem == 0 or k < rem) else "false" for k in range(4))
        math = _math(op)
        fixed: dict = {"S": s, "H": h, "W": w, "BATCH_LAST": b - 1, "LAST_MASK": Code(f"vec4<bool>({mask})"),
                       "LOWEST": Code(literal(-FLT_MAX)), **{k: v for k, v in math.items() if k != "NEEDS_MAX"}}
        bindings = [Binding("src", tensor=op.inputs[0]), Binding("dst", tensor=op.outputs[0], writable=True)]
        tiles = b * h * w
        functions = [Code(f) for f in helpers_for(str(math["SUM_TERM"]))]

        def make(d: Decomposition) -> KernelSpec:
            shared, dispatch = tiling.split_params(d, tiles, ["m"], "max({a}, {b})")
            max_pass = ""
            if math["NEEDS_MAX"]:
                max_pass = (f"for (var s = k; s < {s}u; s += {d.split}u) {{\n"
                            "    var v = vec4<f32>(src[base + s * plane]);\n"
                            f"    if (s == {s - 1}u) {{ v = select(vec4<f32>({literal(-FLT_MAX)}), v, last_mask); }}\n"
                            "    m = max(m, v);\n  }\n  " + shared["REDUCE"])
            params = {**fixed, **shared, "MAX_PASS": Code(max_pass),
                      "REDUCE_SUM": codegen.lane_reduce(["acc"], d, first=not math["NEEDS_MAX"])}
            return KernelSpec("softmax", params, bindings, grid=(tiles * d.split, 1, 1), functions=functions,
                              workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch, out_channels=c,
                              label=f"{op.code} [{d.describe()}]")

        passes = 3 if math["NEEDS_MAX"] else 2  # each reads a slice; exp or a square, a sum, a division
        return [tiling.variants("softmax", {"S": s, "H": h, "W": w, "B": b, "C": c}, [(1, 1)], s, lambda _: tiles,
                                lambda _: passes * (tiling.LOAD + 16), make, b * h * w * c,
                                [str(v) for v in math.values()])]


KERNEL = SoftmaxKernel()
