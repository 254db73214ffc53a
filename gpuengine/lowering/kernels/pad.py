"""PAD, PADV2 (constant value) and MIRROR_PAD (REFLECT / SYMMETRIC) on PHWC4, ranks 1-4.

Each output vec4 maps its (b, y, x) back to input coordinates through one small generated function per axis
(constant: -1 outside the input; mirror: reflected index). Without channel padding the input vec4 is copied
whole; with channel padding lanes move across slices, so each lane is gathered on its own.
"""

from __future__ import annotations

import math

import numpy as np

from ...model.ir import Graph, Op
from .. import codegen
from ..codegen import literal
from ..layout import slices, to_bhwc
from .base import Binding, Code, KernelSpec, Lowering
from .common import bhwc, float_tensors, is_const, tensor_values

# Which BHWC axes the logical axes of a rank-r tensor become (see layout.to_bhwc).
_AXES = {1: (3,), 2: (0, 3), 3: (0, 2, 3), 4: (0, 1, 2, 3)}
_MODES = {0: "reflect", 1: "symmetric"}  # tflite MirrorPadMode


def _mode(op: Op) -> str:
    return "constant" if op.code != "MIRROR_PAD" else _MODES.get(int(op.opt("mode", 0) or 0), "unknown")


def bhwc_paddings(graph: Graph, op: Op) -> list[tuple[int, int]]:
    """The [rank, 2] paddings constant re-indexed to the four BHWC axes."""
    rank = len(graph.tensors[op.inputs[0]].shape)
    pads = np.asarray(graph.tensors[op.inputs[1]].data).reshape(rank, 2)
    out = [(0, 0)] * 4
    for axis, (before, after) in zip(_AXES[rank], pads):
        out[axis] = (int(before), int(after))
    return out


def _map_fn(name: str, n: int, before: int, mode: str) -> Code:
    """fn map_<name>(o) -> input index along one axis, or -1 where the output lies in constant padding."""
    numbers = {"NAME": Code(name), "N": n, "BEFORE": before}
    if mode == "constant":
        return Code(codegen.fill("pad/map_constant.wgsl", numbers) + "\n")
    low, high = ("-i", f"{2 * n - 2} - i") if mode == "reflect" else ("-i - 1", f"{2 * n - 1} - i")
    return Code(codegen.fill("pad/map_mirror.wgsl", {**numbers, "LOW": Code(low), "HIGH": Code(high)}) + "\n")


class PadKernel:
    ops = ("PAD", "PADV2", "MIRROR_PAD")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) < 2 or len(op.outputs) != 1 or (op.code != "PADV2" and len(op.inputs) != 2):
            return "unexpected number of inputs or outputs"
        reason = float_tensors(op, graph, [0])
        if reason:
            return reason
        x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if not 1 <= len(x.shape) <= 4:
            return f"input rank {len(x.shape)} is not 1-4"
        if not is_const(graph, op.inputs[1]):
            return "paddings are not constant"
        pads = np.asarray(graph.tensors[op.inputs[1]].data)
        if pads.size != 2 * len(x.shape):
            return f"paddings have shape {pads.shape}, expected [{len(x.shape)}, 2]"
        if (pads < 0).any():
            return "negative paddings are not supported"
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            if not is_const(graph, op.inputs[2]) or graph.tensors[op.inputs[2]].size != 1:
                return "the pad value is not a constant scalar"
            if not math.isfinite(float(np.asarray(graph.tensors[op.inputs[2]].data).reshape(-1)[0])):
                return "the pad value is not finite"
        mode = _mode(op)
        if mode == "unknown":
            return f"mirror pad mode {op.opt('mode')} is unknown"
        shape_in = to_bhwc(x.shape)
        pads4 = bhwc_paddings(graph, op)
        expect = tuple(n + a + b for n, (a, b) in zip(shape_in, pads4))
        if expect != to_bhwc(out.shape):
            return f"output shape {out.shape} does not match the padded input {expect}"
        if mode != "constant":
            limit = (lambda n: n - 1) if mode == "reflect" else (lambda n: n)
            for n, (a, b) in zip(shape_in, pads4):
                if max(a, b) > limit(n):
                    return f"{mode} padding {max(a, b)} exceeds what an axis of size {n} can mirror"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        x_t, out_t = op.inputs[0], op.outputs[0]
        b, h, w, c = bhwc(graph, x_t)
        ob, oh, ow, oc = bhwc(graph, out_t)
        pads = bhwc_paddings(graph, op)
        mode = _mode(op)
        value = 0.0
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            value = float(tensor_values(graph.tensors[op.inputs[2]]).reshape(-1)[0])
        maps = [_map_fn(name, n, before, mode) for name, n, (before, _) in zip("byxc", (b, h, w, c), pads)]
        params = {
            "S": slices(oc), "H": oh, "W": ow, "IS": slices(c), "IH": h, "IW": w, "IC": c,
            "MAPS": Code("".join(maps)), "VALUE": Code(literal(value)),
            "WHOLE": pads[3] == (0, 0),  # no channel padding: copy input vec4s as they are
        }
        bindings = [Binding("src", tensor=x_t), Binding("dst", tensor=out_t, writable=True)]
        return [KernelSpec("pad", params, bindings,
                           grid=(ow, oh, ob * slices(oc)), out_channels=oc, label=f"{op.code} {mode}")]


KERNEL = PadKernel()
