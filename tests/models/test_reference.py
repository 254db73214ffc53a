"""The float64 reference executor (gpuengine/reference.py) against LiteRT, op family by op family, and on whole
models: it must agree with LiteRT's float32 kernels within float32 rounding, so that where an engine differs
from it by more, the engine is the one that is off."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from helpers import random_inputs, relative_error, run_litert

from gpuengine import zoo
from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.reference import reference_ops, run_reference

F = np.float32
RNG = np.random.default_rng(0)


def u(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(F)


def i32(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


class In:
    """A graph input fed with `value` (a constant operand is given as a bare array)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value


def one_op(code: str, inputs: list[Any], out: tuple[int, ...] | list[tuple[int, ...]],
           options: dict[str, Any] | None = None, out_dtype: Any = np.float32) -> tuple[bytes, dict[int, np.ndarray]]:
    mb = ModelBuilder()
    feeds, ids = {}, []
    for k, v in enumerate(inputs):
        if isinstance(v, In):
            t = mb.input(f"in{k}", v.value.shape, v.value.dtype)
            feeds[t] = v.value
        else:
            t = mb.const(f"c{k}", v)
        ids.append(t)
    outs = mb.op(code, ids, out, options, dtype=out_dtype)
    mb.output(*(outs if isinstance(outs, list) else [outs]))
    return mb.build(), feeds


def check(model: bytes, feeds: dict[int, np.ndarray], tol: float = 2e-6) -> None:
    want = run_litert(model, feeds)
    got = run_reference(model, feeds)
    for t, ref in want.items():
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(got[t], ref)
        else:
            assert got[t].dtype == np.float64
            assert relative_error(got[t], ref) <= tol, (t, got[t], ref)


X = (2, 5, 6, 3)
UNARY = {"ABS": u(*X), "CEIL": u(*X), "COS": u(*X), "ELU": u(*X), "EXP": u(*X), "FLOOR": u(*X),
         "HARD_SWISH": u(*X, low=-5, high=5), "LOG": u(*X, low=0.1), "LOGISTIC": u(*X, low=-8, high=8),
         "NEG": u(*X), "RELU": u(*X), "RELU6": u(*X, low=-2, high=8), "RELU_0_TO_1": u(*X), "RELU_N1_TO_1": u(*X),
         "RSQRT": u(*X, low=0.1), "SIN": u(*X), "SQRT": u(*X, low=0.0), "SQUARE": u(*X), "TANH": u(*X),
         "ROUND": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7], F), "SIGN": u(*X)}


@pytest.mark.parametrize("code", sorted(UNARY))
def test_unary(code):
    x = UNARY[code]
    check(*one_op(code, [In(x)], x.shape))


@pytest.mark.parametrize("code,options", [("GELU", {"approximate": False}), ("GELU", {"approximate": True}),
                                          ("LEAKY_RELU", {"alpha": 0.2})])
def test_unary_with_options(code, options):
    check(*one_op(code, [In(u(*X))], X, options))


@pytest.mark.parametrize("code,act", [("ADD", "NONE"), ("SUB", "RELU"), ("MUL", "RELU6"), ("DIV", "RELU_N1_TO_1"),
                                      ("MAXIMUM", None), ("MINIMUM", None), ("SQUARED_DIFFERENCE", None),
                                      ("FLOOR_DIV", None), ("FLOOR_MOD", None), ("POW", None)])
def test_binary_broadcast(code, act):
    a, b = u(2, 1, 6, 3), u(5, 1, 3)
    if code in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):
        b = np.where(np.abs(b) < 0.3, F(0.7), b)
    if code == "POW":
        a = np.abs(a) + F(0.1)
    check(*one_op(code, [In(a), b], (2, 5, 6, 3), {"fused_activation_function": act} if act else None))


def test_integer_division_and_modulo():
    a, b = i32(7, -7, 7, -7, 9, 0), i32(2, 2, -2, -2, 3, 5)
    for code in ("FLOOR_DIV", "FLOOR_MOD", "DIV"):
        check(*one_op(code, [In(a), b], (6,), out_dtype=np.int32))


@pytest.mark.parametrize("code", ["EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"])
def test_compare(code):
    a = np.round(u(2, 4, 3))
    check(*one_op(code, [In(a), np.round(u(4, 1))], (2, 4, 3), out_dtype=np.bool_))


def test_prelu_and_select():
    check(*one_op("PRELU", [In(u(*X)), u(1, 1, 3)], X))
    cond = u(2, 1, 3) > 0
    for code in ("SELECT_V2", "SELECT"):
        shapes = (cond, u(2, 4, 3), u(2, 4, 3)) if code == "SELECT_V2" else (u(2, 4, 3) > 0, u(2, 4, 3), u(2, 4, 3))
        check(*one_op(code, [In(shapes[0]), In(shapes[1]), shapes[2]], (2, 4, 3)))


@pytest.mark.parametrize("padding,stride,dilation,groups,act", [
    ("SAME", 1, 1, 1, "NONE"), ("SAME", 2, 1, 1, "RELU"), ("VALID", 2, 1, 1, "RELU6"), ("SAME", 1, 2, 1, "NONE"),
    ("VALID", 1, 1, 2, "NONE")])
def test_conv2d(padding, stride, dilation, groups, act):
    x = u(1, 9, 8, 4)
    w = u(6, 3, 3, 4 // groups)
    opts = {"padding": padding, "stride_h": stride, "stride_w": stride, "dilation_h_factor": dilation,
            "dilation_w_factor": dilation, "fused_activation_function": act}
    eff = 2 * dilation + 1
    oh, ow = ((9 + stride - 1) // stride, (8 + stride - 1) // stride) if padding == "SAME" else (
        (9 - eff) // stride + 1, (8 - eff) // stride + 1)
    check(*one_op("CONV_2D", [In(x), w, u(6)], (1, oh, ow, 6), opts))


@pytest.mark.parametrize("padding,stride,multiplier,dilation", [("SAME", 1, 1, 1), ("SAME", 2, 2, 1),
                                                                ("VALID", 1, 1, 2)])
def test_depthwise(padding, stride, multiplier, dilation):
    x = u(2, 8, 7, 3)
    opts = {"padding": padding, "stride_h": stride, "stride_w": stride, "depth_multiplier": multiplier,
            "dilation_h_factor": dilation, "dilation_w_factor": dilation, "fused_activation_function": "RELU6"}
    eff = 2 * dilation + 1
    oh, ow = ((8 + stride - 1) // stride, (7 + stride - 1) // stride) if padding == "SAME" else (
        (8 - eff) // stride + 1, (7 - eff) // stride + 1)
    check(*one_op("DEPTHWISE_CONV_2D", [In(x), u(1, 3, 3, 3 * multiplier), u(3 * multiplier)],
                  (2, oh, ow, 3 * multiplier), opts))


@pytest.mark.parametrize("padding,out_hw", [("SAME", (10, 12)), ("VALID", (11, 13)), ("SAME", (9, 11))])
def test_transpose_conv(padding, out_hw):
    x = u(1, 5, 6, 3)
    opts = {"padding": padding, "stride_h": 2, "stride_w": 2}
    check(*one_op("TRANSPOSE_CONV", [i32(1, *out_hw, 4), u(4, 3, 3, 3), In(x), u(4)], (1, *out_hw, 4), opts))


@pytest.mark.parametrize("padding,in_hw,k,stride", [(1, (5, 6), (3, 4), (2, 2)), (2, (4, 3), (2, 3), (3, 1)),
                                                    (1, (6, 5), (4, 4), (2, 3))])
def test_mediapipe_transpose_conv(padding, in_hw, k, stride):
    """Convolution2DTransposeBias (LiteRT's wheel runs this one MediaPipe op): TfLiteTransposeConvParams options."""
    pad = [max(0, kk - (n - 1) % s - 1) if padding == 1 else 0 for n, kk, s in zip(in_hw, k, stride)]
    out = (1, *[s * (n - 1) + kk - p for n, kk, s, p in zip(in_hw, k, stride, pad)], 5)
    raw = struct.pack("<3i", padding, stride[1], stride[0])
    mb = ModelBuilder()
    x = mb.input("x", (1, *in_hw, 3))
    mb.output(mb.op("Convolution2DTransposeBias", [x, mb.const("w", u(5, *k, 3)), mb.const("b", u(5))], out,
                    custom_options=raw))
    check(mb.build(), {x: u(1, *in_hw, 3)})


def test_mediapipe_pooling_with_argmax_and_unpooling():
    """MaxPoolingWithArgmax2D / MaxUnpooling2D (LiteRT has neither): a brute-force statement of MediaPipe's loops."""
    raw = struct.pack("<6i", 1, 2, 2, 3, 2, 3)  # SAME, stride 2x2, filter 2 (h) x 3 (w), RELU6
    mb = ModelBuilder()
    x = mb.input("x", (1, 5, 7, 2))
    pooled, idx = mb.op("MaxPoolingWithArgmax2D", [x], [(1, 3, 4, 2), (1, 3, 4, 2)], custom_options=raw)
    back = mb.op("MaxUnpooling2D", [pooled, idx], (1, 6, 12, 2), custom_options=raw)
    mb.output(pooled, idx, back)
    xs = np.round(u(1, 5, 7, 2, low=-8, high=8))  # ties: the first maximum wins
    got = run_reference(mb.build(), {x: xs})
    want_max, want_idx, want_back = np.zeros((1, 3, 4, 2)), np.zeros((1, 3, 4, 2)), np.zeros((1, 6, 12, 2))
    for y, xx, c in np.ndindex(3, 4, 2):
        y0, x0 = y * 2 - 0, xx * 2 - 1  # SAME padding: (3-1)*2+2-5 = 1 row (0 before), (4-1)*2+3-7 = 2 columns
        best, arg = -np.inf, 0
        for fy in range(2):
            for fx in range(3):
                if 0 <= y0 + fy < 5 and 0 <= x0 + fx < 7 and xs[0, y0 + fy, x0 + fx, c] > best:
                    best, arg = xs[0, y0 + fy, x0 + fx, c], fy * 3 + fx
        want_max[0, y, xx, c], want_idx[0, y, xx, c] = min(max(best, 0), 6), arg + 0.1
    for y, xx, c in np.ndindex(3, 4, 2):  # unpooling pads (3-1)*2+2-6 = 0 rows, (4-1)*2+3-12 < 0: none
        i = int(want_idx[0, y, xx, c])
        want_back[0, y * 2 + i // 3, xx * 2 + i % 3, c] = want_max[0, y, xx, c]
    for t, want in zip((pooled, idx, back), (want_max, want_idx, want_back)):
        np.testing.assert_allclose(got[t], want, rtol=0, atol=1e-12)


def test_fully_connected_and_batch_matmul():
    check(*one_op("FULLY_CONNECTED", [In(u(3, 10)), u(7, 10), u(7)], (3, 7), {"fused_activation_function": "RELU"}))
    check(*one_op("FULLY_CONNECTED", [In(u(2, 3, 10)), u(7, 10)], (2, 3, 7), {"keep_num_dims": True}))
    check(*one_op("BATCH_MATMUL", [In(u(2, 4, 5)), In(u(1, 6, 5))], (2, 4, 6), {"adj_y": True}))
    check(*one_op("BATCH_MATMUL", [In(u(3, 5, 4)), u(5, 6)], (3, 4, 6), {"adj_x": True}))


@pytest.mark.parametrize("code", ["AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"])
@pytest.mark.parametrize("padding,out_hw", [("SAME", (4, 3)), ("VALID", (3, 3))])
def test_pool(code, padding, out_hw):
    x = u(2, 7, 6, 5, low=0.0) if code == "L2_POOL_2D" else u(2, 7, 6, 5)
    opts = {"padding": padding, "stride_h": 2, "stride_w": 2, "filter_height": 3, "filter_width": 2,
            "fused_activation_function": "RELU6" if code == "MAX_POOL_2D" else "NONE"}
    check(*one_op(code, [In(x)], (2, *out_hw, 5), opts))


@pytest.mark.parametrize("code", ["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"])
def test_reduce(code):
    x = u(2, 6, 5, 4, low=0.5, high=1.5) if code == "REDUCE_PROD" else u(2, 6, 5, 4)
    check(*one_op(code, [In(x), i32(1, -2)], (2, 4), {"keep_dims": False}))
    check(*one_op(code, [In(x), i32(3)], (2, 6, 5, 1), {"keep_dims": True}))


def test_softmax_family():
    x = u(3, 7, low=-20, high=20)
    check(*one_op("SOFTMAX", [In(x)], x.shape, {"beta": 0.5}))
    check(*one_op("LOG_SOFTMAX", [In(x)], x.shape))
    check(*one_op("L2_NORMALIZATION", [In(x)], x.shape))


def test_layout_ops():
    x = u(2, 3, 4, 5)
    check(*one_op("RESHAPE", [In(x), i32(6, 20)], (6, 20)))
    check(*one_op("SQUEEZE", [In(u(2, 1, 4, 1))], (2, 4), {"squeeze_dims": [1, 3]}))
    check(*one_op("EXPAND_DIMS", [In(u(2, 4)), i32(1)], (2, 1, 4)))
    check(*one_op("TRANSPOSE", [In(x), i32(0, 3, 1, 2)], (2, 5, 3, 4)))
    check(*one_op("CONCATENATION", [In(x), u(2, 3, 4, 2)], (2, 3, 4, 7), {"axis": -1}))
    # LiteRT's float kernel ignores a fused activation here (its reference kernel refuses it): so does the executor
    check(*one_op("CONCATENATION", [In(x), u(2, 3, 4, 2)], (2, 3, 4, 7), {"axis": 3, "fused_activation_function": 1}))
    check(*one_op("PACK", [In(u(3, 4)), u(3, 4)], (3, 2, 4), {"axis": 1, "values_count": 2}))
    check(*one_op("UNPACK", [In(u(3, 2, 4))], [(3, 4), (3, 4)], {"axis": 1, "num": 2}))
    check(*one_op("SPLIT", [i32(2), In(x)], [(2, 3, 2, 5), (2, 3, 2, 5)], {"num_splits": 2}))
    check(*one_op("SPLIT_V", [In(x), i32(1, -1, 2), i32(3)], [(2, 3, 4, 1), (2, 3, 4, 2), (2, 3, 4, 2)],
                  {"num_splits": 3}))
    check(*one_op("SLICE", [In(x), i32(0, 1, 1, 2), i32(-1, 2, 3, 2)], (2, 2, 3, 2)))
    check(*one_op("TILE", [In(u(2, 3)), i32(2, 3)], (4, 9)))


@pytest.mark.parametrize("begin,end,strides,masks,out", [
    ((0, 1, 0, 1), (2, 3, 4, 5), (1, 1, 2, 2), {}, (2, 2, 2, 2)),
    ((1, -1, 3, 0), (2, 0, 0, 5), (1, -1, -1, 3), {"begin_mask": 1}, (2, 2, 3, 2)),
    ((0, 1, 0, 0), (0, 2, 4, 5), (1, 1, 1, 1), {"shrink_axis_mask": 2, "end_mask": 1}, (2, 4, 5)),
])
def test_strided_slice(begin, end, strides, masks, out):
    check(*one_op("STRIDED_SLICE", [In(u(2, 3, 4, 5)), i32(*begin), i32(*end), i32(*strides)], out, masks))


def test_gather():
    params = u(4, 5, 3)
    check(*one_op("GATHER", [In(params), i32(3, 0, 2, 2)], (4, 4, 3), {"axis": 1}))
    check(*one_op("GATHER", [In(params), np.array([[1, 0], [3, 2], [0, 0], [4, 1]], np.int32)], (4, 2, 3),
                  {"axis": 1, "batch_dims": 1}))


def test_pads():
    x = u(1, 4, 5, 3)
    pads = np.array([[0, 0], [1, 2], [2, 0], [0, 1]], np.int32)
    check(*one_op("PAD", [In(x), pads], (1, 7, 7, 4)))
    check(*one_op("PADV2", [In(x), pads, np.array([1.5], F)], (1, 7, 7, 4)))
    for mode in (0, 1):  # REFLECT, SYMMETRIC
        check(*one_op("MIRROR_PAD", [In(x), np.array([[0, 0], [2, 1], [1, 2], [0, 0]], np.int32)], (1, 7, 8, 3),
                      {"mode": mode}))


@pytest.mark.parametrize("code", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("size", [(9, 13), (3, 2)])
def test_resize(code, align, half, size):
    check(*one_op(code, [In(u(2, 5, 6, 3)), i32(*size)], (2, *size, 3),
                  {"align_corners": align, "half_pixel_centers": half}))


def test_space_depth_batch():
    x = u(2, 4, 6, 3)
    check(*one_op("SPACE_TO_DEPTH", [In(x)], (2, 2, 3, 12), {"block_size": 2}))
    check(*one_op("DEPTH_TO_SPACE", [In(u(1, 2, 3, 8))], (1, 4, 6, 2), {"block_size": 2}))
    check(*one_op("SPACE_TO_BATCH_ND", [In(x), i32(2, 3), np.array([[0, 2], [1, 2]], np.int32)], (12, 3, 3, 3)))
    check(*one_op("BATCH_TO_SPACE_ND", [In(u(12, 3, 3, 3)), i32(2, 3), np.array([[0, 1], [1, 2]], np.int32)],
                  (2, 5, 6, 3)))


def test_quantized_tensors_are_real_numbers():
    """An int8 input is dequantized, int8 per-channel weights too (DEQUANTIZE of a constant, as converters write
    them); QUANTIZE and DEQUANTIZE are the identity on real values, so LiteRT's int8 output differs from the real
    one by at most half a step of its grid."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 5, 5, 3), np.int8)
    mb.tensors[x].quantization = Quantization(np.array([0.05], F), np.array([3], np.int64))
    y = mb.op("DEQUANTIZE", [x], (1, 5, 5, 3))
    wq = mb.const("wq", RNG.integers(-127, 128, (4, 3, 3, 3)), np.int8,
                  Quantization(np.array([0.01, 0.02, 0.015, 0.03], F), np.zeros(4, np.int64), axis=0))
    w = mb.op("DEQUANTIZE", [wq], (4, 3, 3, 3))
    z = mb.op("CONV_2D", [y, w, mb.const("b", u(4))], (1, 5, 5, 4), {"padding": "SAME", "stride_h": 1, "stride_w": 1})
    qz = mb.op("QUANTIZE", [z], (1, 5, 5, 4), dtype=np.int8)
    mb.tensors[qz].quantization = Quantization(np.array([0.1], F), np.array([-2], np.int64))
    mb.output(z, qz)
    model = mb.build()
    feeds = {x: RNG.integers(-128, 128, (1, 5, 5, 3)).astype(np.int8)}
    want, got = run_litert(model, feeds), run_reference(model, feeds)
    assert relative_error(got[z], want[z]) <= 2e-6
    clipped = np.clip(got[qz], (-128 + 2) * 0.1, (127 + 2) * 0.1)
    assert np.max(np.abs(clipped - (want[qz].astype(np.float64) + 2) * 0.1)) <= 0.05 + 1e-6


def test_covers_every_gpu_op():
    """Every op the GPU runs has a float64 definition (internal ops that passes create are not in models)."""
    assert set(registry.supported_ops()) <= set(reference_ops())


@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "segmentation"])
def test_zoo_models_match_litert(name):
    model = zoo.get(name)
    check(model, random_inputs(model, seed=2), tol=1e-5)


@pytest.mark.models
@pytest.mark.parametrize("name", ["face_detection_short_range", "face_landmark", "selfie_segmentation",
                                  "hand_landmark_lite", "palm_detection_lite", "pose_detection",
                                  "face_detection_full_range_sparse", "iris_landmark"])
def test_reference_models_match_litert(name):
    from gpuengine.tools import fetch

    try:
        model = fetch.model_path(name).read_bytes()
    except fetch.ModelsUnavailable as e:
        pytest.skip(f"reference models unavailable (offline?): {e}")
    check(model, random_inputs(model, seed=1, low=0.0, high=1.0), tol=1e-5)


def test_unknown_op_is_named():
    model, feeds = one_op("NoSuchCustomOp", [In(u(2, 3))], (2, 3))
    with pytest.raises(NotImplementedError, match=r"op 0 \(NoSuchCustomOp\)"):
        run_reference(model, feeds)


def test_feeds_in_input_order_and_all_tensors():
    model, feeds = one_op("ADD", [In(u(2, 3)), In(u(2, 3))], (2, 3))
    by_order = run_reference(model, list(feeds.values()))
    everything = run_reference(model, feeds, all_tensors=True)
    assert set(everything) == {0, 1, 2} and np.array_equal(by_order[2], everything[2])
    assert math.isclose(float(everything[2][0, 0]), float(feeds[0][0, 0]) + float(feeds[1][0, 0]), rel_tol=1e-15)
