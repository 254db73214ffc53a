"""Pooling (and MediaPipe's argmax pooling and unpooling): what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Op
from ..ops import SAME, VALID
from ._common import (
    CONV_STRIDES,
    F64,
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _custom_ints,
    _custom_ints_or_zeros,
    _r,
    _spatial,
    _windows,
    at_least,
    finish_rules,
    pad_before,
    ranks,
    registrar,
    same_dtype,
    window_out_size,
)

NAME = "pooling"
CODES: tuple[str, ...] = (
    "AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D", "MaxPoolingWithArgmax2D", "MaxUnpooling2D")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def pool_shape(v: OpView) -> list[tuple[int, ...]]:
    b, _, _, c = v.shape(0)
    oh, ow = _spatial(v, int(v.opt("filter_height")), int(v.opt("filter_width")), dilated=False)
    return [(b, oh, ow, c)]


def mp_pooling(v: OpView) -> None:
    """MaxPoolingWithArgmax2D / MaxUnpooling2D: TfLitePoolParams {padding, stride_w, stride_h, filter_w,
    filter_h, activation}."""
    padding, sw, sh, fw, fh, _ = _custom_ints(v, 6, "TfLitePoolParams")
    if padding not in (1, 2) or min(sw, sh, fw, fh) < 1:
        raise Invalid(f"custom options: padding {padding} (1 SAME, 2 VALID), strides ({sh}, {sw}) and filter "
                      f"({fh}, {fw}) must be >= 1")


POOL = _r(1, 1, checks=[ranks(in0=(4, 4)), same_dtype([0]), *CONV_STRIDES, at_least("filter_height", 1),
                        at_least("filter_width", 1)], shape=pool_shape)


def _pool_with_argmax(v: OpView, g: Graph) -> list[tuple[int, ...]]:
    padding, sw, sh, fw, fh, _ = _custom_ints_or_zeros(v, 6)
    b, h, w, c = v.shape(0)
    p = SAME if padding == 1 else VALID
    shape = (b, window_out_size(p, h, fh, sh, 1, "filter height"), window_out_size(p, w, fw, sw, 1, "filter width"), c)
    return [shape] * len(v.op.outputs)


def _unpooling(v: OpView, g: Graph) -> list[tuple[int, ...]]:
    padding, sw, sh, fw, fh, _ = _custom_ints_or_zeros(v, 6)
    b, h, w, c = v.shape(0)
    if padding == 1:
        return [(b, h * sh, w * sw, c)]
    return [(b, (h - 1) * sh + fh, (w - 1) * sw + fw, c)]


RULES: dict[str, Rule] = {
    "MaxPoolingWithArgmax2D": _r(1, 2, checks=[ranks(in0=(4, 4)), mp_pooling], custom=True),
    "MaxUnpooling2D": _r(2, 1, checks=[ranks(in0=(4, 4), in1=(4, 4)), mp_pooling], custom=True),
    "AVERAGE_POOL_2D": POOL,
    "MAX_POOL_2D": POOL,
    "L2_POOL_2D": POOL,
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "AVERAGE_POOL_2D": ("f16 f32 i16 i8 u8", ""),
    "MAX_POOL_2D": ("f32 i16 i8 u8", ""),
    "L2_POOL_2D": ("f32", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {
    "MaxPoolingWithArgmax2D": _pool_with_argmax,
    "MaxUnpooling2D": _unpooling,
}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


def _pool_geometry(n: Node) -> tuple[tuple[int, int], tuple[int, int], int]:
    return ((int(n.opt("filter_height", 1)), int(n.opt("filter_width", 1))),
            (int(n.opt("stride_h", 1)), int(n.opt("stride_w", 1))), int(n.opt("padding", SAME)))


@builtin("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D")
def _pool(n: Node) -> list[np.ndarray]:
    """TFLite's pools ignore the padding: averages divide by the count of input elements in the window."""
    x = n.x()
    k, stride, padding = _pool_geometry(n)
    if n.op.code == "MAX_POOL_2D":
        taps, _ = _windows(x, k, stride, (1, 1), padding, fill=-np.inf)
        return [n.act(np.max(np.stack([t for _, _, t in taps]), axis=0))]
    value = np.square(x) if n.op.code == "L2_POOL_2D" else x
    taps, _ = _windows(value, k, stride, (1, 1), padding)
    counts, _ = _windows(np.ones(x.shape[:3] + (1,)), k, stride, (1, 1), padding)
    mean = sum(t for _, _, t in taps) / sum(c for _, _, c in counts)
    return [n.act(np.sqrt(mean) if n.op.code == "L2_POOL_2D" else mean)]


def _pool_params(n: Node) -> tuple[int, int, int, int, int, int]:
    """MediaPipe's TfLitePoolParams: padding (1 SAME, 2 VALID), stride_w, stride_h, filter_w, filter_h, activation."""
    return struct.unpack_from("<6i", n.op.custom_options or b"")


@custom("MaxPoolingWithArgmax2D")
def _max_pool_argmax(n: Node) -> list[np.ndarray]:
    """max_pool_argmax.cc: the first maximum of each window (strict >) and f32(fy * filter_w + fx) + 0.1, its
    offset in the unclamped window; the maximum clamped by the activation."""
    padding, sw, sh, fw, fh, activation = _pool_params(n)
    x = n.x()
    taps, _ = _windows(x, (fh, fw), (sh, sw), (1, 1), SAME if padding == 1 else VALID, fill=-np.inf)
    best = np.full(taps[0][2].shape, -np.inf)
    arg = np.zeros(best.shape)
    for fy, fx, tap in taps:
        better = tap > best
        best, arg = np.where(better, tap, best), np.where(better, fy * fw + fx, arg)
    return [n.act(best, activation), arg + 0.1]


@custom("MaxUnpooling2D")
def _max_unpool(n: Node) -> list[np.ndarray]:
    """max_unpooling.cc: each input element written at its window origin + its decoded offset, later (raster
    order) writes winning; the output is [B, H * filter_h, W * filter_w, C]."""
    _, sw, sh, fw, fh, _ = _pool_params(n)
    values, indices = n.x(0), n.x(1).astype(np.int64)
    b, h, w, c = values.shape
    oh, ow = n.out_shape()[1:3]
    pt, pl = pad_before(oh, fh, sh, 1, h), pad_before(ow, fw, sw, 1, w)  # as the GPU kernel and its tests
    out = np.zeros((b, oh, ow, c), F64)
    bi, ci = np.meshgrid(np.arange(b), np.arange(c), indexing="ij")
    for y in range(h):
        for x in range(w):
            idx = indices[:, y, x, :]
            oy, ox = y * sh - pt + idx // fw, x * sw - pl + idx % fw
            ok = (oy >= 0) & (oy < oh) & (ox >= 0) & (ox < ow)
            out[bi[ok], oy[ok], ox[ok], ci[ok]] = values[:, y, x, :][ok]
    return [out]
