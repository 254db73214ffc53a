"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (NHWC, float32) with TFLite's align_corners/half_pixel_centers.

The source coordinates depend only on the output row or column, so they are computed once on the host in
float32 exactly as TFLite's reference kernels do (scale, offset, floor / round-half-away, edge clamps) and
bound as a small table: one vec4 per output row then per output column. The GPU never re-derives them, so
fused multiply-adds or round-half-even on the device cannot move a nearest-neighbour sample by one pixel.
"""

from __future__ import annotations

import math

import numpy as np

from ...model.ir import Graph, Op
from ..layout import slices
from .base import Binding, KernelSpec, Lowering
from .common import bhwc, float_tensors, is_const

_F = np.float32


def _scale(n_in: int, n_out: int, align_corners: bool) -> np.float32:
    if align_corners and n_out > 1:
        return _F(n_in - 1) / _F(n_out - 1)
    return _F(n_in) / _F(n_out)


def bilinear_table(n_in: int, n_out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """Per output index: (lower, upper, frac, 1 - frac) as TFLite's ComputeInterpolationValues gives them."""
    scale = _scale(n_in, n_out, align_corners)
    rows = np.zeros((n_out, 4), np.float32)
    for o in range(n_out):
        v = (_F(o) + _F(0.5)) * scale - _F(0.5) if half_pixel else _F(o) * scale
        lo = max(int(math.floor(v)), 0)
        hi = min(int(math.ceil(v)), n_in - 1)
        frac = _F(v - _F(lo))
        rows[o] = (lo, hi, frac, _F(1) - frac)
    return rows


def nearest_table(n_in: int, n_out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """Per output index: (source, 0, 0, 0) as TFLite's GetNearestNeighbor gives it (std::round: half away)."""
    scale = _scale(n_in, n_out, align_corners)
    offset = _F(0.5) if half_pixel else _F(0.0)
    rows = np.zeros((n_out, 4), np.float32)
    for o in range(n_out):
        v = float((_F(o) + offset) * scale)  # >= 0, so round-half-away is floor(v + 0.5) (exact in float64)
        src = min(int(math.floor(v + 0.5)) if align_corners else int(math.floor(v)), n_in - 1)
        rows[o, 0] = max(src, 0) if half_pixel else src
    return rows


class ResizeKernel:
    ops = ("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 2 or len(op.outputs) != 1:
            return "expects 2 inputs and 1 output"
        reason = float_tensors(op, graph, [0])
        if reason:
            return reason
        x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if len(x.shape) != 4 or len(out.shape) != 4:
            return "only 4-D NHWC tensors are resized"
        if not is_const(graph, op.inputs[1]):
            return "the output size is not constant"
        size = np.asarray(graph.tensors[op.inputs[1]].data).reshape(-1)
        if size.size != 2 or tuple(int(v) for v in size) != tuple(out.shape[1:3]):
            return f"size {size.tolist()} does not match the output shape {out.shape}"
        if min(out.shape) < 1 or min(x.shape) < 1:
            return "empty tensors are not resized"
        if out.shape[0] != x.shape[0] or out.shape[3] != x.shape[3]:
            return "batch and channels must be kept"
        both = op.opt("align_corners", False) and op.opt("half_pixel_centers", False)
        if op.code == "RESIZE_BILINEAR" and both:
            return "align_corners together with half_pixel_centers is rejected by TFLite's bilinear kernel"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        x_t, out_t = op.inputs[0], op.outputs[0]
        _, h, w, _ = bhwc(graph, x_t)
        b, oh, ow, c = bhwc(graph, out_t)
        ac, hp = bool(op.opt("align_corners", False)), bool(op.opt("half_pixel_centers", False))
        bilinear = op.code == "RESIZE_BILINEAR"
        table_fn = bilinear_table if bilinear else nearest_table
        table = np.concatenate([table_fn(h, oh, ac, hp), table_fn(w, ow, ac, hp)]).reshape(-1)
        params = {"S": slices(c), "H": oh, "W": ow, "IH": h, "IW": w}
        bindings = [Binding("src", tensor=x_t), Binding("tab", data=table, element="vec4<f32>"),  # indices, weights
                    Binding("dst", tensor=out_t, writable=True)]
        return [KernelSpec("resize_bilinear" if bilinear else "resize_nearest", params, bindings,
                           grid=(ow, oh, b * slices(c)), out_channels=c,
                           label=f"{op.code} align_corners={ac} half_pixel_centers={hp}")]


KERNEL = ResizeKernel()
