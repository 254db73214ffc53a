"""A float64 reference executor of the IR: a second oracle that gives the exact result of a model, so an engine's
error is measured against it instead of against another float32 engine (LiteRT's kernels round too).

    from gpuengine.reference import run_reference
    exact = run_reference(model_bytes, {input_index: x})      # {output tensor index: float64 array}

Every op is evaluated in numpy float64 from its TFLite (or MediaPipe) definition, one function per op code in
BUILTIN_OPS / CUSTOM_OPS: the ops gpuengine runs on the GPU (`gpuengine ops`), MediaPipe's custom ops, and the
load-time ones models carry (DENSIFY, SHAPE, CAST, QUANTIZE, DEQUANTIZE). Quantized tensors hold real numbers
here: constants and fed int8/uint8 inputs are dequantized, QUANTIZE and DEQUANTIZE are the identity, so an int8
engine is measured against the real-valued model it approximates (rounding to the grids included in its error).
Integer tensors (shapes, indices) stay integers. Index choices that TFLite defines by float32 arithmetic
(nearest-neighbour and bilinear resize source coordinates) are computed as TFLite computes them; the values
sampled are then combined in float64. LiteRT's float kernels ignore a fused TANH or SIGN_BIT activation, and so
does this executor. The graph runs as read: no passes, no fusion.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from .model import quantization
from .model.densify import densify
from .model.ir import Graph, Model, Op, Tensor
from .model.mediapipe_options import landmarks_options, matrix_options
from .model.ops import SAME, VALID, out_size
from .model.quantization import INT4, unpack_int4
from .model.reader import read_model
from .model.validate import validate_model

F64 = np.float64
Fn = Callable[["Node"], list[np.ndarray]]


# -- values --------------------------------------------------------------------------------------------------------
def is_real(t: Tensor) -> bool:
    """A tensor whose values are real numbers here: floats, and integers carrying quantization parameters."""
    if np.issubdtype(t.dtype, np.floating):
        return True
    q = t.quantization
    return q is not None and (q.scale.size > 0 or q.blockwise) and np.issubdtype(t.dtype, np.integer)


def dequantize(t: Tensor, data: np.ndarray) -> np.ndarray:
    """Stored values of tensor t (int8/uint8/int16/int32 with scale and zero point, or floats) as float64."""
    return quantization.dequantize(t, data, F64)


def _constant(t: Tensor) -> np.ndarray:
    data = unpack_int4(t) if t.type_code == INT4 else densify(t, t.shape) if t.sparsity is not None else t.data
    data = np.asarray(data).reshape(t.shape)
    return dequantize(t, data) if is_real(t) else data.astype(np.int64) if data.dtype.kind in "iu" else data


def _as_declared(t: Tensor, value: Any) -> np.ndarray:
    """An op's result as this executor holds tensor t: float64 for real tensors, int64 or bool otherwise, in t's
    declared shape when the element counts agree (RESHAPE-like results)."""
    value = np.asarray(value)
    if is_real(t):
        value = value.astype(F64)
    elif t.dtype == np.bool_:
        value = value.astype(np.bool_)
    elif np.issubdtype(t.dtype, np.integer):
        value = value.astype(np.int64)
    if value.shape != tuple(t.shape) and value.size == t.size and all(d >= 0 for d in t.shape):
        value = value.reshape(t.shape)
    return value


class Node:
    """One op as an op function sees it: its input values (None for omitted ones) and options."""

    def __init__(self, op: Op, graph: Graph, args: list[np.ndarray | None]) -> None:
        self.op, self.graph, self.args = op, graph, args

    def x(self, i: int = 0) -> np.ndarray:
        value = self.args[i]
        if value is None:
            raise ValueError(f"input {i} is omitted")
        return value

    def has(self, i: int) -> bool:
        return i < len(self.args) and self.args[i] is not None

    def ints(self, i: int) -> list[int]:
        return [int(v) for v in np.asarray(self.x(i)).reshape(-1)]

    def opt(self, name: str, default: Any = None) -> Any:
        value = self.op.opt(name, default)
        return default if value is None else value

    def out(self, k: int = 0) -> Tensor:
        return self.graph.tensors[self.op.outputs[k]]

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        return tuple(self.out(k).shape)

    def act(self, value: np.ndarray, code: int | None = None) -> np.ndarray:
        """The fused activation (NONE, RELU, RELU_N1_TO_1, RELU6; TANH and SIGN_BIT ignored, as LiteRT does)."""
        code = int(self.opt("fused_activation_function", 0)) if code is None else code
        bounds = {1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}.get(code)
        if bounds is None:
            return value
        low, high = bounds
        out = np.maximum(value, low)
        out = np.where(np.isnan(value), value, out if high is None else np.minimum(out, high))
        return out


BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}


def _register(table: dict[str, Fn], *codes: str) -> Callable[[Fn], Fn]:
    def wrap(fn: Fn) -> Fn:
        for code in codes:
            table[code] = fn
        return fn
    return wrap


def builtin(*codes: str) -> Callable[[Fn], Fn]:
    return _register(BUILTIN_OPS, *codes)


def custom(*codes: str) -> Callable[[Fn], Fn]:
    return _register(CUSTOM_OPS, *codes)


# -- elementwise ---------------------------------------------------------------------------------------------------
def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[F64])(x)
    return erf(x)


def _gelu(n: Node) -> np.ndarray:
    x = n.x()
    if n.opt("approximate", False):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ABS": np.abs, "CEIL": np.ceil, "COS": np.cos, "EXP": np.exp, "FLOOR": np.floor, "LOG": np.log,
    "NEG": np.negative, "SIN": np.sin, "SQRT": np.sqrt, "SQUARE": np.square, "TANH": np.tanh, "ROUND": np.round,
    "SIGN": np.sign, "RSQRT": lambda x: 1.0 / np.sqrt(x), "LOGISTIC": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "ELU": lambda x: np.where(x < 0, np.expm1(np.minimum(x, 0)), x),
    "HARD_SWISH": lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    "RELU": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0.0)),
    "RELU6": lambda x: np.where(np.isnan(x), x, np.clip(x, 0.0, 6.0)),
    "RELU_0_TO_1": lambda x: np.where(np.isnan(x), x, np.clip(x, 0.0, 1.0)),
    "RELU_N1_TO_1": lambda x: np.where(np.isnan(x), x, np.clip(x, -1.0, 1.0)),
    "LOGICAL_NOT": np.logical_not, "ZEROS_LIKE": np.zeros_like,
}
for _code, _fn in _UNARY.items():
    builtin(_code)(lambda n, fn=_fn: [fn(n.x())])
builtin("GELU")(lambda n: [_gelu(n)])
builtin("LEAKY_RELU")(lambda n: [np.where(n.x() >= 0, n.x(), n.x() * F64(n.opt("alpha", 0.0)))])
builtin("PRELU")(lambda n: [np.where(n.x(0) >= 0, n.x(0), n.x(0) * n.x(1))])


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TFLite's integer DIV: C++ division, truncating toward zero."""
    return np.trunc(a.astype(F64) / b).astype(np.int64)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _int_div(a, b) if a.dtype.kind in "iu" and b.dtype.kind in "iu" else a / b


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.floor_divide(a, b) if a.dtype.kind in "iu" and b.dtype.kind in "iu" else np.floor(a / b)


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": _divide, "FLOOR_DIV": _floor_div,
    "FLOOR_MOD": np.mod, "MAXIMUM": np.maximum, "MINIMUM": np.minimum, "POW": np.power,
    "SQUARED_DIFFERENCE": lambda a, b: np.square(a - b), "EQUAL": np.equal, "NOT_EQUAL": np.not_equal,
    "GREATER": np.greater, "GREATER_EQUAL": np.greater_equal, "LESS": np.less, "LESS_EQUAL": np.less_equal,
    "LOGICAL_AND": np.logical_and, "LOGICAL_OR": np.logical_or,
}
_WITH_ACTIVATION = {"ADD", "SUB", "MUL", "DIV"}
for _code, _fn in _BINARY.items():
    if _code in _WITH_ACTIVATION:
        builtin(_code)(lambda n, fn=_fn: [n.act(fn(n.x(0), n.x(1)))])
    else:
        builtin(_code)(lambda n, fn=_fn: [fn(n.x(0), n.x(1))])


@builtin("SELECT", "SELECT_V2")
def _select(n: Node) -> list[np.ndarray]:
    cond, a, b = n.x(0).astype(bool), n.x(1), n.x(2)
    if n.op.code == "SELECT" and cond.ndim == 1 and a.ndim > 1 and cond.shape[0] == a.shape[0]:
        cond = cond.reshape((-1,) + (1,) * (a.ndim - 1))  # TF1 Select: a vector condition picks rows
    return [np.where(cond, a, b)]


# -- convolutions --------------------------------------------------------------------------------------------------
def pad_before(size: int, k: int, stride: int, dilation: int, out: int) -> int:
    """TFLite's ComputePaddingWithOffset: the padding before the first element (the odd one goes after)."""
    return max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0) // 2


def _windows(x: np.ndarray, k: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int], padding: int,
             fill: float = 0.0) -> tuple[list[tuple[int, int, np.ndarray]], tuple[int, int]]:
    """Every tap (i, j) of a 2-D window over NHWC x, as an [N, OH, OW, C] view of the padded input."""
    _, h, w, _ = x.shape
    oh, ow = (out_size(padding, h, k[0], stride[0], dilation[0]), out_size(padding, w, k[1], stride[1], dilation[1]))
    pt, pl = pad_before(h, k[0], stride[0], dilation[0], oh), pad_before(w, k[1], stride[1], dilation[1], ow)
    pb = max(0, (oh - 1) * stride[0] + (k[0] - 1) * dilation[0] + 1 - h - pt)
    pr = max(0, (ow - 1) * stride[1] + (k[1] - 1) * dilation[1] + 1 - w - pl)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    taps = []
    for i in range(k[0]):
        for j in range(k[1]):
            y0, x0 = i * dilation[0], j * dilation[1]
            taps.append((i, j, xp[:, y0:y0 + (oh - 1) * stride[0] + 1:stride[0],
                                  x0:x0 + (ow - 1) * stride[1] + 1:stride[1], :]))
    return taps, (oh, ow)


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


# -- pooling and reductions ----------------------------------------------------------------------------------------
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


def _axes(n: Node, rank: int) -> tuple[int, ...]:
    return tuple(sorted({a + rank if a < 0 else a for a in n.ints(1)}))


_REDUCERS = {"MEAN": np.mean, "SUM": np.sum, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min, "REDUCE_PROD": np.prod,
             "REDUCE_ALL": np.all, "REDUCE_ANY": np.any}


@builtin(*_REDUCERS)
def _reduce(n: Node) -> list[np.ndarray]:
    x = n.x()
    return [_REDUCERS[n.op.code](x, axis=_axes(n, x.ndim), keepdims=bool(n.opt("keep_dims", False)))]


@builtin("SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")
def _softmax(n: Node) -> list[np.ndarray]:
    x = n.x()
    if n.op.code == "L2_NORMALIZATION":
        return [x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), 1e-6)]
    z = x * F64(n.opt("beta", 1.0)) if n.op.code == "SOFTMAX" else x
    z = z - np.max(z, axis=-1, keepdims=True)
    total = np.sum(np.exp(z), axis=-1, keepdims=True)
    return [np.exp(z) / total if n.op.code == "SOFTMAX" else z - np.log(total)]


# -- layout --------------------------------------------------------------------------------------------------------
@builtin("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(n: Node) -> list[np.ndarray]:
    return [n.x().reshape(n.out_shape())]


@builtin("TRANSPOSE")
def _transpose(n: Node) -> list[np.ndarray]:
    return [np.transpose(n.x(0), n.ints(1))]


@builtin("CONCATENATION")
def _concat(n: Node) -> list[np.ndarray]:
    """A fused activation is ignored, as LiteRT's float kernel does (its reference kernel refuses one)."""
    return [np.concatenate(n.args, axis=int(n.opt("axis", 0)))]  # type: ignore[arg-type]


@builtin("PACK")
def _pack(n: Node) -> list[np.ndarray]:
    return [np.stack(n.args, axis=int(n.opt("axis", 0)))]  # type: ignore[arg-type]


@builtin("UNPACK")
def _unpack(n: Node) -> list[np.ndarray]:
    return list(np.moveaxis(n.x(), int(n.opt("axis", 0)), 0))


@builtin("SPLIT")
def _split(n: Node) -> list[np.ndarray]:
    return np.split(n.x(1), len(n.op.outputs), axis=n.ints(0)[0])


@builtin("SPLIT_V")
def _split_v(n: Node) -> list[np.ndarray]:
    x, sizes, axis = n.x(0), n.ints(1), n.ints(2)[0]
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


@builtin("SLICE")
def _slice(n: Node) -> list[np.ndarray]:
    x, begin, size = n.x(0), n.ints(1), n.ints(2)
    return [x[tuple(slice(b, x.shape[d] if s < 0 else b + s) for d, (b, s) in enumerate(zip(begin, size)))]]


@builtin("STRIDED_SLICE")
def _strided_slice(n: Node) -> list[np.ndarray]:
    """TF's StridedSlice = numpy basic indexing: masks pick full ranges, new axes, an ellipsis or an index."""
    x, begin, end, strides = n.x(0), n.ints(1), n.ints(2), n.ints(3)
    masks = {k: int(n.opt(f"{k}_mask", 0)) for k in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}
    index: list[Any] = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if masks["ellipsis"] & bit:
            index.append(Ellipsis)
        elif masks["new_axis"] & bit:
            index.append(np.newaxis)
        elif masks["shrink_axis"] & bit:
            index.append(b)
        else:
            if n.opt("offset", False):
                e = b + e
            index.append(slice(None if masks["begin"] & bit else b, None if masks["end"] & bit else e, s))
    return [x[tuple(index)]]


@builtin("TILE")
def _tile(n: Node) -> list[np.ndarray]:
    return [np.tile(n.x(0), n.ints(1))]


@builtin("GATHER")
def _gather(n: Node) -> list[np.ndarray]:
    params, indices = n.x(0), n.x(1).astype(np.int64)
    axis, batch = int(n.opt("axis", 0)), int(n.opt("batch_dims", 0))
    axis, batch = axis + params.ndim if axis < 0 else axis, batch + indices.ndim if batch < 0 else batch
    if batch == 0:
        return [np.take(params, indices, axis=axis)]
    lead = params.shape[:batch]
    parts = [np.take(params[i], indices[i], axis=axis - batch) for i in np.ndindex(*lead)]
    return [np.stack(parts).reshape(n.out_shape())]


@builtin("EMBEDDING_LOOKUP")
def _embedding_lookup(n: Node) -> list[np.ndarray]:
    ids, table = n.x(0).astype(np.int64), n.x(1)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(f"EMBEDDING_LOOKUP: id outside [0, {table.shape[0]})")
    return [table[ids]]


@builtin("GATHER_ND")
def _gather_nd(n: Node) -> list[np.ndarray]:
    params, indices = n.x(0), n.x(1).astype(np.int64)
    k = indices.shape[-1]
    if indices.size and (indices.min() < 0 or (indices >= np.array(params.shape[:k])).any()):
        raise ValueError("GATHER_ND: index out of bounds")
    return [params[tuple(np.moveaxis(indices, -1, 0))]]


@builtin("DYNAMIC_UPDATE_SLICE")
def _dynamic_update_slice(n: Node) -> list[np.ndarray]:
    """The update placed at the start offsets, each clamped so that the update fits (XLA's and LiteRT's rule)."""
    operand, update = n.x(0).copy(), n.x(1)
    start = [min(max(int(s), 0), d - u) for s, d, u in zip(n.ints(2), operand.shape, update.shape)]
    operand[tuple(slice(s, s + u) for s, u in zip(start, update.shape))] = update
    return [operand]


@builtin("BROADCAST_TO")
def _broadcast_to(n: Node) -> list[np.ndarray]:
    return [np.broadcast_to(n.x(0), n.ints(1)).copy()]


@builtin("PAD", "PADV2")
def _pad(n: Node) -> list[np.ndarray]:
    x = n.x(0)
    pads = np.asarray(n.x(1), np.int64).reshape(-1, 2)
    value = float(np.asarray(n.x(2)).reshape(-1)[0]) if n.op.code == "PADV2" and n.has(2) else 0.0
    return [np.pad(x, [tuple(p) for p in pads], constant_values=value)]


@builtin("MIRROR_PAD")
def _mirror_pad(n: Node) -> list[np.ndarray]:
    pads = [tuple(p) for p in np.asarray(n.x(1), np.int64).reshape(-1, 2)]
    return [np.pad(n.x(0), pads, mode="reflect" if int(n.opt("mode", 0)) == 0 else "symmetric")]


def _resize_scale(n_in: int, n_out: int, align_corners: bool) -> np.float32:
    if align_corners and n_out > 1:
        return np.float32(n_in - 1) / np.float32(n_out - 1)
    return np.float32(n_in) / np.float32(n_out)


@builtin("RESIZE_BILINEAR")
def _resize_bilinear(n: Node) -> list[np.ndarray]:
    """TFLite's ResizeBilinear: source coordinates in float32 as TFLite computes them, the blend in float64."""
    x = n.x(0)
    oh, ow = n.ints(1)
    ac, hp = bool(n.opt("align_corners", False)), bool(n.opt("half_pixel_centers", False))

    def coords(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scale = _resize_scale(n_in, n_out, ac)
        o = np.arange(n_out, dtype=np.float32)
        v = (o + np.float32(0.5)) * scale - np.float32(0.5) if hp else o * scale
        lo = np.maximum(np.floor(v).astype(np.int64), 0)
        hi = np.minimum(np.ceil(v).astype(np.int64), n_in - 1)
        return lo, hi, v.astype(F64) - lo
    y0, y1, dy = coords(x.shape[1], oh)
    x0, x1, dx = coords(x.shape[2], ow)
    dy, dx = dy[None, :, None, None], dx[None, None, :, None]
    top = x[:, y0][:, :, x0] * (1 - dx) + x[:, y0][:, :, x1] * dx
    bottom = x[:, y1][:, :, x0] * (1 - dx) + x[:, y1][:, :, x1] * dx
    return [top * (1 - dy) + bottom * dy]


@builtin("RESIZE_NEAREST_NEIGHBOR")
def _resize_nearest(n: Node) -> list[np.ndarray]:
    x = n.x(0)
    oh, ow = n.ints(1)
    ac, hp = bool(n.opt("align_corners", False)), bool(n.opt("half_pixel_centers", False))

    def source(n_in: int, n_out: int) -> np.ndarray:
        v = ((np.arange(n_out, dtype=np.float32) + np.float32(0.5 if hp else 0.0))
             * _resize_scale(n_in, n_out, ac)).astype(F64)
        idx = np.floor(v + 0.5) if ac else np.floor(v)  # std::round of v >= 0: half away from zero
        idx = np.minimum(idx.astype(np.int64), n_in - 1)
        return np.maximum(idx, 0) if hp else idx
    return [x[:, source(x.shape[1], oh)][:, :, source(x.shape[2], ow)]]


@builtin("SPACE_TO_DEPTH")
def _space_to_depth(n: Node) -> list[np.ndarray]:
    x, bs = n.x(), int(n.opt("block_size", 1))
    b, h, w, c = x.shape
    return [x.reshape(b, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h // bs, w // bs, -1)]


@builtin("DEPTH_TO_SPACE")
def _depth_to_space(n: Node) -> list[np.ndarray]:
    x, bs = n.x(), int(n.opt("block_size", 1))
    b, h, w, c = x.shape
    return [x.reshape(b, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5).reshape(b, h * bs, w * bs, -1)]


@builtin("SPACE_TO_BATCH_ND")
def _space_to_batch(n: Node) -> list[np.ndarray]:
    x, block = n.x(0), n.ints(1)
    m = len(block)
    pads = np.asarray(n.x(2), np.int64).reshape(m, 2)
    x = np.pad(x, [(0, 0), *[tuple(p) for p in pads], *[(0, 0)] * (x.ndim - 1 - m)])
    b, spatial, rest = x.shape[0], x.shape[1:1 + m], x.shape[1 + m:]
    split = [b]
    for s, k in zip(spatial, block):
        split += [s // k, k]
    x = x.reshape(*split, *rest)
    order = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, x.ndim))
    return [x.transpose(order).reshape(b * int(np.prod(block)), *[s // k for s, k in zip(spatial, block)], *rest)]


@builtin("BATCH_TO_SPACE_ND")
def _batch_to_space(n: Node) -> list[np.ndarray]:
    x, block = n.x(0), n.ints(1)
    m = len(block)
    crops = np.asarray(n.x(2), np.int64).reshape(m, 2)
    b = x.shape[0] // int(np.prod(block))
    spatial, rest = x.shape[1:1 + m], x.shape[1 + m:]
    x = x.reshape(*block, b, *spatial, *rest)
    order = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, x.ndim))
    x = x.transpose(order).reshape(b, *[s * k for s, k in zip(spatial, block)], *rest)
    return [x[(slice(None), *[slice(c0, x.shape[1 + i] - c1) for i, (c0, c1) in enumerate(crops)])]]


# -- types and load-time ops ---------------------------------------------------------------------------------------
builtin("QUANTIZE", "DEQUANTIZE", "DENSIFY")(lambda n: [n.x()])  # values are real numbers already
builtin("CAST")(lambda n: [n.x()])  # _as_declared converts to the output's type
builtin("SHAPE")(lambda n: [np.asarray(n.x().shape, np.int64)])


# -- MediaPipe's landmark ops (kernels/mediapipe_landmarks.py describes the definitions) -----------------------------
def _matrix_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = np.asarray(m, F64).reshape(-1)
    return flat[0:4].copy(), flat[4:8].copy()


@custom("Landmarks2TransformMatrix")
def _landmarks_to_matrix(n: Node) -> list[np.ndarray]:
    """landmarks_to_transform_matrix.cc, version 2: Shift(centre) * R(-r) * Scale * Shift(-output size / 2)."""
    landmarks = n.x().reshape(-1)
    opts = matrix_options(n.op, n.x().shape[1])
    if isinstance(opts, str):
        raise ValueError(opts)

    def xy(i: int) -> np.ndarray:
        return landmarks[3 * i:3 * i + 2]
    left, right = xy(opts["left"]), xy(opts["right"])
    r = opts["target"] - math.atan2(right[1] - left[1], right[0] - left[0])
    rot = np.array([[math.cos(r), -math.sin(r)], [math.sin(r), math.cos(r)]])
    points = np.stack([xy(i) for i in opts["subset"]]) @ rot.T
    lo, hi = points.min(axis=0), points.max(axis=0)
    cx, cy = rot.T @ ((lo + hi) / 2)  # R(-r) = R(r)^T
    sx = opts["scale_x"] * (hi[0] - lo[0]) / opts["out_w"]
    sy = opts["scale_y"] * (hi[1] - lo[1]) / opts["out_h"]

    def affine(a: np.ndarray, t: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
        m = np.eye(4)
        m[:2, :2], m[:2, 3] = a, t
        return m
    t = (affine(np.eye(2), (cx, cy)) @ affine(rot.T) @ affine(np.diag([sx, sy]))
         @ affine(np.eye(2), (-opts["out_w"] / 2.0, -opts["out_h"] / 2.0)))
    return [t.reshape(1, 4, 4)]


@custom("TransformTensorBilinear", "TransformTensor")
def _transform_tensor(n: Node) -> list[np.ndarray]:
    """transform_tensor_bilinear.cc: output pixel (x, y) samples batch 0 at rows 0-1 of the matrix times
    (x, y, 0, 1), zero outside [0, W-1] x [0, H-1], bilinear with out-of-range neighbours 0; version 2 first moves
    the matrix to pixel centres."""
    x = n.x(0)[0]
    xt, yt = _matrix_rows(n.x(1))
    if n.op.code == "TransformTensorBilinear":
        xt[3] += xt[0] * 0.5 + xt[1] * 0.5 - 0.5
        yt[3] += yt[0] * 0.5 + yt[1] * 0.5 - 0.5
    _, oh, ow, c = n.out_shape()
    h, w = x.shape[:2]
    oy, ox = np.meshgrid(np.arange(oh, dtype=F64), np.arange(ow, dtype=F64), indexing="ij")
    tx, ty = xt[0] * ox + xt[1] * oy + xt[3], yt[0] * ox + yt[1] * oy + yt[3]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    fx, fy = np.floor(np.where(inside, tx, 0)), np.floor(np.where(inside, ty, 0))
    padded = np.pad(x[..., :c], ((0, 1), (0, 1), (0, 0)))  # the neighbour past the last row/column reads 0
    x0, y0 = fx.astype(np.int64), fy.astype(np.int64)
    right, lower = (tx - fx)[..., None], (ty - fy)[..., None]
    top = (1 - right) * padded[y0, x0] + right * padded[y0, x0 + 1]
    bottom = (1 - right) * padded[y0 + 1, x0] + right * padded[y0 + 1, x0 + 1]
    return [np.where(inside[..., None], lower * bottom + (1 - lower) * top, 0.0)[None]]


@custom("TransformLandmarks")
def _transform_landmarks(n: Node) -> list[np.ndarray]:
    """transform_landmarks.cc: x, y of each landmark -> rows 0-1 of the matrix times (x, y, 0, 1) (version 1:
    translation times `scale`); z unchanged; batch 0."""
    opts = landmarks_options(n.op, n.graph)
    if isinstance(opts, str):
        raise ValueError(opts)
    x = n.x(0)
    d = opts["dimensions"]
    xt, yt = _matrix_rows(n.x(1))
    xt[3] *= opts["scale"]
    yt[3] *= opts["scale"]
    points = x[0].reshape(-1, d)
    out = points.copy()
    out[:, 0] = xt[0] * points[:, 0] + xt[1] * points[:, 1] + xt[3]
    out[:, 1] = yt[0] * points[:, 0] + yt[1] * points[:, 1] + yt[3]
    return [out.reshape(x.shape)]


# -- running a graph -----------------------------------------------------------------------------------------------
def reference_ops() -> list[str]:
    """The op codes this executor evaluates (builtins and custom ops)."""
    return sorted(set(BUILTIN_OPS) | set(CUSTOM_OPS))


def _graph(model: bytes | str | os.PathLike | Model | Graph) -> Graph:
    if isinstance(model, Graph):
        return model
    if not isinstance(model, Model):
        model = read_model(model)
        validate_model(model)
    return model.main


def feed_value(t: Tensor, value: Any) -> np.ndarray:
    """A value fed for input t, as the executor holds it (quantized inputs dequantized)."""
    value = np.asarray(value)
    if tuple(value.shape) != tuple(t.shape):
        raise ValueError(f"input {t.index} ({t.name!r}) has shape {t.shape}, fed {value.shape}")
    return _as_declared(t, dequantize(t, value) if is_real(t) else value)


def run_reference(model: bytes | str | os.PathLike | Model | Graph,
                  feeds: Mapping[int, Any] | Sequence[Any], *, all_tensors: bool = False,
                  round_to: Any = None, round_only: Collection[int] | None = None,
                  given: Mapping[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """Evaluate the model's main graph in float64 (a path, .tflite bytes, a read Model or a Graph).

    feeds: {input tensor index: value} or the values in the graph's input order; quantized inputs are given as
    their stored integers (as set_tensor takes them) and dequantized. Returns {output tensor index: value}
    (every tensor, constants included, with all_tensors=True, to compare intermediates); real tensors are
    float64, integer and bool tensors int64 and bool. An op without a definition here raises
    NotImplementedError naming it.

    round_to (e.g. np.float32 or np.float16): every real result is rounded to that type once, after its op is
    evaluated exactly — an engine whose every op is correctly rounded, the least error any engine holding
    tensors in that type can have on the model (its distance from the exact run measures how ill-conditioned
    the model is; tests/test_accuracy.py). round_only: round only these tensors (inputs included): an engine that
    stores just those in that type (mixed precision, gpuengine/mixed_precision.py).

    given: values to take as they are for tensors no rounded tensor feeds (an earlier run's all_tensors values of
    the ops before the first rounded one): ops whose outputs are all given are skipped, so a run that rounds only
    late tensors costs only the ops after them.
    """
    graph = _graph(model)
    if not isinstance(feeds, Mapping):
        feeds = dict(zip(graph.inputs, feeds))
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise ValueError(f"no value fed for inputs {missing}")
    values: dict[int, np.ndarray] = {t: feed_value(graph.tensors[t], feeds[t]) for t in graph.inputs}

    def rounded(t: int) -> bool:
        return round_to is not None and is_real(graph.tensors[t]) and (round_only is None or t in round_only)

    for t in graph.inputs:
        if round_only is not None and rounded(t):
            values[t] = values[t].astype(round_to).astype(F64)

    def value(t: int) -> np.ndarray:
        if t not in values:
            tensor = graph.tensors[t]
            if tensor.data is None:
                raise ValueError(f"tensor {t} ({tensor.name!r}) is read before it is written")
            values[t] = _constant(tensor)
        return values[t]

    for op in graph.ops:
        if given is not None and op.outputs and all(t in given and not rounded(t) for t in op.outputs):
            values.update((t, given[t]) for t in op.outputs)
            continue
        fn = (CUSTOM_OPS if op.is_custom else BUILTIN_OPS).get(op.code)
        if fn is None:
            raise NotImplementedError(f"op {op.index} ({op.code}) has no float64 reference definition")
        with np.errstate(all="ignore"):
            outs = fn(Node(op, graph, [value(t) if t >= 0 else None for t in op.inputs]))
        if len(outs) != len(op.outputs):
            raise ValueError(f"op {op.index} ({op.code}): {len(outs)} results for {len(op.outputs)} outputs")
        for t, v in zip(op.outputs, outs):
            values[t] = _as_declared(graph.tensors[t], v)
            if rounded(t):
                values[t] = values[t].astype(round_to).astype(F64)
    if all_tensors:
        for t in range(len(graph.tensors)):
            if graph.tensors[t].data is not None:
                value(t)
        return values
    return {t: value(t) for t in graph.outputs}


class SignatureRunner:
    """A signature run in float64, called as LiteRT's signature runners are: runner(**named inputs) -> {output name:
    value}. STABLEHLO_COMPOSITE ops (litert-torch's attention, RMSNorm) are evaluated through their decomposition
    subgraphs, inlined once here (passes/inline_composites.py), so the model's own definition is what runs."""

    def __init__(self, model: bytes | str | os.PathLike | Model, key: str) -> None:
        from .passes.inline_composites import inline_composites

        if not isinstance(model, Model):
            model = read_model(model)
            validate_model(model)
        signatures = {s.key: s for s in model.signatures}
        if key not in signatures:
            raise ValueError(f"Invalid signature_key provided: {key!r}; available: {sorted(signatures)}")
        self.signature = signatures[key]
        self.graph = inline_composites(model.subgraphs[self.signature.subgraph], model)

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        sig = self.signature
        missing = sorted(set(sig.inputs) - set(inputs))
        if missing:
            raise ValueError(f"Missing inputs for signature {sig.key!r}: {missing}")
        values = run_reference(self.graph, {t: inputs[name] for name, t in sig.inputs.items()})
        return {name: values[t] for name, t in sig.outputs.items()}
