"""SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND for 4-D NHWC with a constant [2] block and [2, 2] paddings/crops.

Channels never move, so every output vec4 is one input vec4 (or zeros in SPACE_TO_BATCH's padding).
Batch order follows TFLite: output batch (dy * block_w + dx) * B + b.
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from ..layout import slices
from .base import Binding, KernelSpec, Lowering
from .common import bhwc, float_tensors, is_const


def _consts(op: Op, graph: Graph) -> tuple[list[int], list[int]]:
    block = [int(v) for v in np.asarray(graph.tensors[op.inputs[1]].data).reshape(-1)]
    pads = [int(v) for v in np.asarray(graph.tensors[op.inputs[2]].data).reshape(-1)]
    return block, pads


def _expected(op: Op, shape: tuple[int, ...], block: list[int], pads: list[int]) -> tuple[int, ...] | None:
    b, h, w, c = shape
    (bh, bw), (top, bottom, left, right) = block, pads
    if op.code == "SPACE_TO_BATCH_ND":
        ph, pw = h + top + bottom, w + left + right
        if ph % bh or pw % bw:
            return None
        return (b * bh * bw, ph // bh, pw // bw, c)
    if b % (bh * bw):
        return None
    return (b // (bh * bw), h * bh - top - bottom, w * bw - left - right, c)


class SpaceBatchKernel:
    ops = ("SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 3 or len(op.outputs) != 1:
            return "expects 3 inputs and 1 output"
        reason = float_tensors(op, graph, [0])
        if reason:
            return reason
        x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if len(x.shape) != 4 or len(out.shape) != 4:
            return "only 4-D NHWC tensors are supported"
        if not (is_const(graph, op.inputs[1]) and is_const(graph, op.inputs[2])):
            return "block shape and paddings/crops must be constant"
        block, pads = _consts(op, graph)
        if len(block) != 2 or len(pads) != 4:
            return f"block shape {block} / paddings {pads} are not [2] / [2, 2]"
        if min(block) < 1 or min(pads) < 0:
            return f"block shape {block} must be positive and paddings/crops {pads} non-negative"
        expect = _expected(op, tuple(x.shape), block, pads)
        if expect is None or expect != tuple(out.shape) or min(expect) < 1:
            return f"output shape {out.shape} does not match {op.code} of {x.shape} (block {block}, {pads})"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        x_t, out_t = op.inputs[0], op.outputs[0]
        ib, h, w, c = bhwc(graph, x_t)
        ob, oh, ow, _ = bhwc(graph, out_t)
        (bh, bw), (top, _, left, _) = _consts(op, graph)
        params = {"S": slices(c), "H": oh, "W": ow, "IH": h, "IW": w,
                  "BH": bh, "BW": bw, "TOP": top, "LEFT": left}
        if op.code == "SPACE_TO_BATCH_ND":
            shader, params["B"] = "space_to_batch", ib
        else:
            shader, params["B"] = "batch_to_space", ob
        bindings = [Binding("src", tensor=x_t), Binding("dst", tensor=out_t, writable=True)]
        return [KernelSpec(shader, params, bindings,
                           grid=(ow, oh, ob * slices(c)), out_channels=c, label=f"{op.code} block {bh}x{bw}")]


KERNEL = SpaceBatchKernel()
