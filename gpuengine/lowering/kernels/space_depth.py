"""DEPTH_TO_SPACE and SPACE_TO_DEPTH (NHWC, TFLite's DCR order) on PHWC4.

DCR: depth index = (dy * block + dx) * C_small + c. When C_small is a multiple of 4, every output vec4 is
one whole input vec4; otherwise lanes straddle slices and each lane is gathered on its own.
"""

from __future__ import annotations

from ...model.ir import Graph, Op
from ..layout import slices
from .base import Binding, KernelSpec, Lowering
from .common import bhwc, float_tensors


def _expected(op: Op, shape: tuple[int, ...], block: int) -> tuple[int, ...] | None:
    b, h, w, c = shape
    if op.code == "DEPTH_TO_SPACE":
        return (b, h * block, w * block, c // (block * block)) if c % (block * block) == 0 else None
    return (b, h // block, w // block, c * block * block) if h % block == 0 and w % block == 0 else None


class SpaceDepthKernel:
    ops = ("DEPTH_TO_SPACE", "SPACE_TO_DEPTH")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 1 or len(op.outputs) != 1:
            return "expects 1 input and 1 output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if len(x.shape) != 4:
            return "only 4-D NHWC tensors are supported"
        block = int(op.opt("block_size", 0) or 0)
        if block < 1:
            return f"block_size {block} is not positive"
        expect = _expected(op, tuple(x.shape), block)
        if expect is None or expect != tuple(out.shape):
            return f"output shape {out.shape} does not match {op.code} of {x.shape} with block {block}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        x_t, out_t = op.inputs[0], op.outputs[0]
        _, h, w, c = bhwc(graph, x_t)
        b, oh, ow, oc = bhwc(graph, out_t)
        block = int(op.opt("block_size"))
        small = oc if op.code == "DEPTH_TO_SPACE" else c  # channels of the spatial (non-depth) side
        params = {"S": slices(oc), "H": oh, "W": ow, "IS": slices(c), "IH": h, "IW": w,
                  "BLOCK": block, "C": small, "WHOLE": small % 4 == 0}
        shader = "depth_to_space" if op.code == "DEPTH_TO_SPACE" else "space_to_depth"
        bindings = [Binding("src", tensor=x_t), Binding("dst", tensor=out_t, writable=True)]
        return [KernelSpec(shader, params, bindings,
                           grid=(ow, oh, b * slices(oc)), out_channels=oc, label=f"{op.code} block {block}")]


KERNEL = SpaceDepthKernel()
