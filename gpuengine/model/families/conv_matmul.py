"""Convolutions and matrix products: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, Op
from ..ops import SAME, VALID, out_size
from ._common import (
    ACTIVATION,
    CONV_STRIDES,
    F64,
    PADDING,
    Check,
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _broadcast,
    _custom_ints,
    _custom_ints_or_zeros,
    _r,
    _spatial,
    _windows,
    at_least,
    broadcast_equations,
    dims_product,
    finish_rules,
    index_dtype,
    one_of,
    pad_before,
    ranks,
    registrar,
    same_dtype,
    window_out_size,
)

NAME = "convolution and matmul"
CODES: tuple[str, ...] = (
    "CONV_2D", "CONV_3D", "CONV_3D_TRANSPOSE", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "Convolution2DTransposeBias",
    "FULLY_CONNECTED", "BATCH_MATMUL")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def conv_shape(v: OpView) -> list[tuple[int, ...]]:
    b, _, _, c = v.shape(0)
    o, kh, kw, i = v.shape(1)
    if i <= 0 or c % i:
        raise Invalid(f"input has {c} channels, the filter {i}: the input's must be a multiple (groups)")
    if o % (c // i):
        raise Invalid(f"{o} output channels do not split into {c // i} groups")
    oh, ow = _spatial(v, kh, kw)
    return [(b, oh, ow, o)]


def depthwise_shape(v: OpView) -> list[tuple[int, ...]]:
    b, _, _, c = v.shape(0)
    one, kh, kw, o = v.shape(1)
    if one != 1:
        raise Invalid(f"filter shape {v.shape(1)} must be [1, KH, KW, O]")
    if c <= 0 or o % c:
        raise Invalid(f"{o} output channels are not a multiple of the {c} input channels")
    oh, ow = _spatial(v, kh, kw)
    return [(b, oh, ow, o)]


CONV_INPUT_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.uint8, np.int8, np.int16))


_BIAS_TYPE = {np.dtype(np.float32): np.dtype(np.float32), np.dtype(np.uint8): np.dtype(np.int32),
              np.dtype(np.int8): np.dtype(np.int32), np.dtype(np.int16): np.dtype(np.int64)}


_FILTER_TYPES = {np.dtype(np.float32): frozenset(np.dtype(t) for t in (np.float32, np.int8, np.uint8))}


def conv_types(data: int, weights: int, bias: int) -> Check:
    """LiteRT's conv-family type rules: float32 or quantized input, output of the same type, a float32 filter
    (int8/uint8 for hybrid models) or a quantized one, a bias of the input's accumulator type; and a filter
    without empty dimensions (LiteRT refuses zero output channels, a 0-size window has no meaning)."""
    def check(v: OpView) -> None:
        x = v.tensor(data)
        if x.dtype not in CONV_INPUT_TYPES:
            raise Invalid(f"input ({x.name!r}) is {x.dtype}; float32, uint8, int8 or int16 expected")
        w = v.tensor(weights)
        allowed = _FILTER_TYPES.get(x.dtype, frozenset(np.dtype(t) for t in (np.int8, np.uint8)))
        if w.dtype not in allowed:
            raise Invalid(f"filter ({w.name!r}) is {w.dtype}, which does not go with a {x.dtype} input")
        if 0 in w.shape:
            raise Invalid(f"filter ({w.name!r}) has an empty dimension: shape {w.shape}")
        if v.has(bias) and v.tensor(bias).dtype != _BIAS_TYPE[x.dtype]:
            raise Invalid(f"bias ({v.tensor(bias).name!r}) is {v.tensor(bias).dtype}, must be "
                          f"{_BIAS_TYPE[x.dtype]} for a {x.dtype} input")
    return check


def bias_size(position: int, filter_axis: int) -> Check:
    """The bias has one value per output channel (dimension filter_axis of the filter)."""
    def check(v: OpView) -> None:
        if v.has(position) and v.tensor(position).size != v.shape(1)[filter_axis]:
            raise Invalid(f"bias ({v.tensor(position).name!r}) has {v.tensor(position).size} values for "
                          f"{v.shape(1)[filter_axis]} output channels")
    return check


def fully_connected_shape(v: OpView) -> list[tuple[int, ...]] | None:
    units, depth = v.shape(1)
    if depth <= 0:
        raise Invalid(f"weights shape {v.shape(1)} has no input depth")
    x = v.shape(0)
    n = int(np.prod(x, dtype=np.int64))
    if n % depth:
        raise Invalid(f"input of {n} values ({x}) does not split into rows of {depth} (weights {v.shape(1)})")
    if v.opt("keep_num_dims"):
        if not x or x[-1] != depth:
            raise Invalid(f"keep_num_dims: the input's last dimension ({x}) must be the weights' depth {depth}")
        return [(*x[:-1], units)]
    if len(v.out_shape()) != 2:  # LiteRT writes [batch, units]; converters also declare other ranks of it
        return None if int(np.prod(v.out_shape(), dtype=np.int64)) == n // depth * units else [(n // depth, units)]
    return [(n // depth, units)]


def batch_matmul_shape(v: OpView) -> list[tuple[int, ...]]:
    a, b = v.shape(0), v.shape(1)
    if len(a) < 2 or len(b) < 2:
        raise Invalid(f"operands of shapes {a} and {b} need rank >= 2")
    rows, inner_a = (a[-1], a[-2]) if v.opt("adj_x") else (a[-2], a[-1])
    inner_b, cols = (b[-1], b[-2]) if v.opt("adj_y") else (b[-2], b[-1])
    if inner_a != inner_b:
        raise Invalid(f"contracted dimensions differ: {inner_a} ({a}) and {inner_b} ({b})")
    return [(*_broadcast(a[:-2], b[:-2]), rows, cols)]


def transpose_conv_shape(v: OpView) -> list[tuple[int, ...]] | None:
    shape = v.ints(0)
    if shape is None:
        return None
    if len(shape) != 4 or min(shape) < 0:
        raise Invalid(f"output_shape {shape} must be 4 sizes >= 0")
    o, kh, kw, i = v.shape(1)
    b, h, w, c = v.shape(2)
    if c != i or shape[3] != o or shape[0] != b:
        raise Invalid(f"input {v.shape(2)}, filter {v.shape(1)} and output_shape {shape} do not agree")
    _check_transposed(v, h, w, shape[1], shape[2], kh, kw)
    return [tuple(shape)]


def _check_transposed(v: OpView, h: int, w: int, oh: int, ow: int, kh: int, kw: int,
                      padding: int | None = None, sh: int | None = None, sw: int | None = None) -> None:
    """The input must be what a forward conv of the output would produce (as TensorFlow requires)."""
    padding = int(v.opt("padding")) if padding is None else padding
    sh = int(v.opt("stride_h")) if sh is None else sh
    sw = int(v.opt("stride_w")) if sw is None else sw
    want = (window_out_size(padding, oh, kh, sh, 1, "filter height"),
            window_out_size(padding, ow, kw, sw, 1, "filter width"))
    if (h, w) != want:
        raise Invalid(f"input spatial size {(h, w)} is not what output size {(oh, ow)} gives with filter "
                      f"{(kh, kw)}, strides {(sh, sw)} and padding {'SAME' if padding == SAME else 'VALID'} "
                      f"({want})")


def mp_transpose_conv(v: OpView) -> None:
    """Convolution2DTransposeBias: TfLiteTransposeConvParams {padding (1 SAME, 2 VALID), stride_w, stride_h}."""
    padding, sw, sh = _custom_ints(v, 3, "TfLiteTransposeConvParams")
    if padding not in (1, 2) or sw < 1 or sh < 1:
        raise Invalid(f"custom options: padding {padding} (1 SAME, 2 VALID), strides ({sh}, {sw}) must be >= 1")
    o, kh, kw, i = v.shape(1)
    b, h, w, c = v.shape(0)
    if c != i or v.tensor(2).size != o:
        raise Invalid(f"input {v.shape(0)}, filter {v.shape(1)} and bias {v.shape(2)} do not agree")
    ob, oh, ow, oc = v.out_shape() if len(v.out_shape()) == 4 else (0, 0, 0, 0)
    if (ob, oc) != (b, o):
        raise Invalid(f"output {v.out_shape()} does not fit input {v.shape(0)} and filter {v.shape(1)}")
    _check_transposed(v, h, w, oh, ow, kh, kw, SAME if padding == 1 else VALID, sh, sw)


DILATIONS = [at_least("dilation_h_factor", 1), at_least("dilation_w_factor", 1)]


def _fully_connected_own_shape(v: OpView, g: Graph) -> list[tuple[int, ...]]:
    units, depth = v.shape(1)
    x = v.shape(0)
    n = dims_product(x)
    if depth <= 0 or n % depth:
        raise Invalid(f"input of {n} values ({x}) does not split into rows of {depth} (weights {v.shape(1)})")
    if v.op.opt("keep_num_dims", False):
        return [(*x[:-1], units)]
    declared = v.out_shape()
    if len(declared) != 2 and dims_product(declared) == n // depth * units:
        return [tuple(declared)]
    return [(n // depth, units)]


def _transpose_conv_bias(v: OpView, g: Graph) -> list[tuple[int, ...]]:
    """MediaPipe's Convolution2DTransposeBias: TfLiteTransposeConvParams {padding (1 SAME, 2 VALID), stride_w,
    stride_h}; the output is what a forward conv of it would give the input from."""
    padding, sw, sh = _custom_ints_or_zeros(v, 3)
    o, kh, kw, _ = v.shape(1)
    b, h, w, _ = v.shape(0)
    if padding == 1:
        return [(b, h * sh, w * sw, o)]
    return [(b, (h - 1) * sh + kh, (w - 1) * sw + kw, o)]


RULES: dict[str, Rule] = {
    # LiteRT 2.3 wants a bias; the GPU kernels take none, and the CPU fallback adds a zero one for LiteRT
    "CONV_2D": _r((2, 3), 1, optional=[2],
                  checks=[ranks(in0=(4, 4), in1=(4, 4), out0=(4, 4)), same_dtype([0]), conv_types(0, 1, 2),
                          *CONV_STRIDES, *DILATIONS, bias_size(2, 0)], shape=conv_shape),
    "DEPTHWISE_CONV_2D": _r((2, 3), 1, optional=[2],
                            checks=[ranks(in0=(4, 4), in1=(4, 4), out0=(4, 4)), same_dtype([0]),
                                    conv_types(0, 1, 2), *CONV_STRIDES, *DILATIONS, bias_size(2, 3)],
                            shape=depthwise_shape),
    "TRANSPOSE_CONV": _r((3, 4), 1, optional=[3],
                         checks=[ranks(in0=(1, 1), in1=(4, 4), in2=(4, 4)), index_dtype(0), same_dtype([2]),
                                 conv_types(2, 1, 3),
                                 at_least("stride_h", 1), at_least("stride_w", 1), PADDING, ACTIVATION,
                                 bias_size(3, 0)], shape=transpose_conv_shape),
    "Convolution2DTransposeBias": _r(3, 1, checks=[ranks(in0=(4, 4), in1=(4, 4), out0=(4, 4)), same_dtype([0]),
                                                   conv_types(0, 1, 2), mp_transpose_conv], custom=True),
    "FULLY_CONNECTED": _r((2, 3), 1, optional=[2],
                          checks=[ranks(in1=(2, 2)), same_dtype([0]), conv_types(0, 1, 2), ACTIVATION,
                                  one_of("weights_format", (0, 1)),
                                  bias_size(2, 0)], shape=fully_connected_shape),
    "BATCH_MATMUL": _r(2, 1, checks=[ranks(in0=(2, 5), in1=(2, 5)), same_dtype([0])], shape=batch_matmul_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "CONV_3D": ((2, 3), (1, 1)),
    "CONV_3D_TRANSPOSE": ((3, 4), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "BATCH_MATMUL": ("f16 f32 i16 i8 u8", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {
    "FULLY_CONNECTED": _fully_connected_own_shape,
    "Convolution2DTransposeBias": _transpose_conv_bias,
}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = {"TRANSPOSE_CONV": 3, "CONV_3D_TRANSPOSE": 3}  # the output shape is an input's values


def _batch_matmul_equations(v: OpView) -> list[tuple[Any, Any]]:
    a, b = v.shape(0), v.shape(1)
    inner_a = a[-2] if v.opt("adj_x") else a[-1]
    inner_b = b[-1] if v.opt("adj_y") else b[-2]
    return [(inner_a, inner_b), *broadcast_equations(a[:-2], b[:-2])]


def _fully_connected_equations(v: OpView) -> list[tuple[Any, Any]]:
    """The input's rows of `depth` values are the output's rows of `units`."""
    units, depth = v.shape(1)
    return [(dims_product(v.shape(0)) * units, dims_product(v.out_shape()) * depth)]


EQUATIONS: dict[str, Callable[[OpView], list[tuple[Any, Any]]]] = {
    "BATCH_MATMUL": _batch_matmul_equations, "FULLY_CONNECTED": _fully_connected_equations,
}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


def _geometry(n: Node) -> tuple[tuple[int, int], tuple[int, int], int]:
    stride = (int(n.opt("stride_h", 1)), int(n.opt("stride_w", 1)))
    dilation = (int(n.opt("dilation_h_factor", 1)), int(n.opt("dilation_w_factor", 1)))
    return stride, dilation, int(n.opt("padding", SAME))


@builtin("CONV_2D")
def _conv2d(n: Node) -> list[np.ndarray]:
    x, w = n.x(0), n.x(1)
    stride, dilation, padding = _geometry(n)
    o, kh, kw, i = w.shape
    groups = x.shape[3] // i
    taps, (oh, ow) = _windows(x, (kh, kw), stride, dilation, padding)
    out = np.zeros((x.shape[0], oh, ow, o), F64)
    wg = w.reshape(groups, o // groups, kh, kw, i)
    for ky, kx, tap in taps:
        t = tap.reshape(*tap.shape[:3], groups, i)
        out += np.einsum("nhwgi,goi->nhwgo", t, wg[:, :, ky, kx, :]).reshape(out.shape)
    if n.has(2):
        out = out + n.x(2)
    return [n.act(out)]


@builtin("DEPTHWISE_CONV_2D")
def _depthwise(n: Node) -> list[np.ndarray]:
    x, w = n.x(0), n.x(1)
    stride, dilation, padding = _geometry(n)
    _, kh, kw, o = w.shape
    x = np.repeat(x, o // x.shape[3], axis=3)  # output channel c reads input channel c // multiplier
    taps, (oh, ow) = _windows(x, (kh, kw), stride, dilation, padding)
    out = np.zeros((x.shape[0], oh, ow, o), F64)
    for ky, kx, tap in taps:
        out += tap * w[0, ky, kx]
    if n.has(2):
        out = out + n.x(2)
    return [n.act(out)]


def _transposed(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pad: tuple[int, int],
                out_hw: tuple[int, int]) -> np.ndarray:
    """out[oy, ox] = sum of x[iy, ix] . W[:, ky, kx, :] over iy * s - pad_top + ky = oy (a scatter, cropped)."""
    nb, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    full = np.zeros((nb, max((h - 1) * stride[0] + kh, pad[0] + out_hw[0]),
                     max((wd - 1) * stride[1] + kw, pad[1] + out_hw[1]), o), F64)
    for ky in range(kh):
        for kx in range(kw):
            full[:, ky:ky + (h - 1) * stride[0] + 1:stride[0], kx:kx + (wd - 1) * stride[1] + 1:stride[1], :] += (
                x @ w[:, ky, kx, :].T)
    return full[:, pad[0]:pad[0] + out_hw[0], pad[1]:pad[1] + out_hw[1], :]


@builtin("TRANSPOSE_CONV")
def _transpose_conv(n: Node) -> list[np.ndarray]:
    """Inputs (output_shape, weights [O, KH, KW, I], input, bias); padding as TFLite computes it on the output."""
    shape, w, x = n.ints(0), n.x(1), n.x(2)
    stride, _, padding = _geometry(n)
    oh, ow = shape[1], shape[2]
    pad = tuple(pad_before(size, k, s, 1, out_size(padding, size, k, s))
                for size, k, s in ((oh, w.shape[1], stride[0]), (ow, w.shape[2], stride[1])))
    out = _transposed(x, w, stride, pad, (oh, ow))  # type: ignore[arg-type]
    if n.has(3):
        out = out + n.x(3)
    return [n.act(out)]


@custom("Convolution2DTransposeBias")
def _mediapipe_transpose_conv(n: Node) -> list[np.ndarray]:
    """MediaPipe's transpose_conv_bias.cc: options TfLiteTransposeConvParams {padding (1 SAME, 2 VALID), stride_w,
    stride_h}; SAME pads max(0, k - (in - 1) % s - 1) in total, half of it (rounded down) before."""
    padding, sw, sh = struct.unpack_from("<3i", n.op.custom_options or b"")
    x, w = n.x(0), n.x(1)

    def pad(size: int, k: int, s: int) -> int:
        return max(0, k - (size - 1) % s - 1) // 2 if padding == 1 else 0
    out_hw = n.out_shape()[1:3]
    out = _transposed(x, w, (sh, sw), (pad(x.shape[1], w.shape[1], sh), pad(x.shape[2], w.shape[2], sw)),
                      (out_hw[0], out_hw[1]))
    return [out + n.x(2)]


@builtin("FULLY_CONNECTED")
def _fully_connected(n: Node) -> list[np.ndarray]:
    w = n.x(1)
    out = n.x(0).reshape(-1, w.shape[1]) @ w.T
    if n.has(2):
        out = out + n.x(2)
    return [n.act(out)]


@builtin("BATCH_MATMUL")
def _batch_matmul(n: Node) -> list[np.ndarray]:
    a, b = n.x(0), n.x(1)
    if n.opt("adj_x", False):
        a = np.swapaxes(a, -1, -2)
    if n.opt("adj_y", False):
        b = np.swapaxes(b, -1, -2)
    return [np.matmul(a, b)]
