"""LAYER_NORM and RMS_NORM: internal ops (passes/fuse_normalization.py) normalizing each row over the last axis.

LAYER_NORM: y = (x - mean) * inv * scale + offset, RMS_NORM: y = x * inv * scale + offset, where inv is
1 / sqrt(var + eps) (var: the mean square deviation, for RMS_NORM the mean square) or, with option eps_outside,
1 / (sqrt(var) + eps). Inputs: x, scale [C], offset [C] (constants). A tile is one row (pixel) and its C/4
slices, as for SOFTMAX: `split` invocations may share a long row and combine their f32 sums through subgroup
shuffles or workgroup memory (kernels/tiling.py). Sums are f32 in fp16 mode too.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import EPS_OUTSIDE, EPSILON, LAYER_NORM, RMS_NORM, SOURCE_OPS
from .. import codegen
from ..codegen import lane_reduce, literal
from ..layout import slices
from . import tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering
from .common import bhwc, const_f32, float_tensors


class NormalizationKernel:
    ops = (LAYER_NORM, RMS_NORM)
    internal_ops = (LAYER_NORM, RMS_NORM)  # made by a pass, never read from a model

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 3 or len(op.outputs) != 1:
            return f"{op.code} expects x, scale, offset and 1 output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        x, scale, offset = op.inputs
        shape = graph.tensors[x].shape
        if not shape or 0 in shape or len(shape) > 4:
            return f"input shape {shape}: needs rank 1..4 and no empty axis"
        if tuple(graph.tensors[op.outputs[0]].shape) != tuple(shape):
            return "input and output shapes differ"
        c = shape[-1]
        for t in (scale, offset):
            if t < 0 or graph.tensors[t].data is None or graph.tensors[t].size != c:
                return f"scale and offset must be constants of {c} values"
        eps = op.opt(EPSILON)
        if not isinstance(eps, float) or not np.isfinite(eps) or eps < 0:
            return f"epsilon {eps!r} must be a finite float >= 0"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        x, scale_t, offset_t = op.inputs
        b, h, w, c = bhwc(graph, x)
        s = slices(c)
        rem = c % 4
        mask = ", ".join("true" if (rem == 0 or k < rem) else "false" for k in range(4))
        rms = op.code == RMS_NORM
        eps = literal(float(op.opt(EPSILON)))
        var = "first" if rms else f"(acc2.x + acc2.y + acc2.z + acc2.w) / {literal(float(c))}"
        inv = (f"1.0 / (sqrt({var}) + {eps})" if op.opt(EPS_OUTSIDE) else f"inverseSqrt({var} + {eps})")

        def padded(t: int) -> np.ndarray:
            out = np.zeros(s * 4, np.float32)
            out[:c] = const_f32(graph, t).reshape(-1)
            return out

        bindings = [Binding("src", tensor=x), Binding("scale", data=padded(scale_t), element="vec4<f32>"),
                    Binding("offset", data=padded(offset_t), element="vec4<f32>"),
                    Binding("dst", tensor=op.outputs[0], writable=True)]
        fixed: dict = {"S": s, "H": h, "W": w, "BATCH_LAST": b - 1, "LAST_MASK": Code(f"vec4<bool>({mask})"),
                       "C_F": Code(literal(float(c))), "FIRST_TERM": Code("v * v" if rms else "v"),
                       "INV": Code(inv)}
        tiles = b * h * w
        source = f"({'+'.join(op.opt(SOURCE_OPS))})" if op.opt(SOURCE_OPS) else ""

        def make(d: Decomposition) -> KernelSpec:
            shared, dispatch = tiling.split_params(d, tiles, ["acc"])
            second = Code("let mean = 0.0;\n  ") if rms else codegen.fill("normalization/second_pass.wgsl", {
                "S": s, "SPLIT": d.split, "REDUCE": lane_reduce(["acc2"], d, first=False)}, "  ")
            params = {**fixed, **shared, "REDUCE_FIRST": shared["REDUCE"], "SECOND_PASS": second}
            fresh = [dataclasses.replace(b) for b in bindings]  # fusion edits a spec's bindings in place
            return KernelSpec("normalization", params, fresh, grid=(tiles * d.split, 1, 1),
                              workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch, out_channels=c,
                              label=f"{op.code}{source} [{d.describe()}]")

        passes = 2 if rms else 3  # each reads the row once
        return [tiling.variants("normalization", {"S": s, "H": h, "W": w, "B": b, "C": c, "RMS": rms}, [(1, 1)],
                                s, lambda _: tiles, lambda _: passes * (tiling.LOAD + 4), make, b * h * w * c,
                                [inv])]


KERNEL = NormalizationKernel()
