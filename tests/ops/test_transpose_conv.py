"""TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias against LiteRT (its wheel runs the custom op):
kernel 1..5, stride 1..3, both paddings, optional bias, fused activations, odd channels, batches."""

from __future__ import annotations

import struct

import numpy as np
from helpers import assert_matches_litert, relative_error, run_gpuengine, support_reason, tolerance
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

CHANNELS = [1, 3, 4, 5, 7, 9]


def tconv_model(
    b: int,
    ih: int,
    iw: int,
    ic: int,
    oc: int,
    kh: int,
    kw: int,
    stride=(1, 1),
    pad: str = "SAME",
    act: str = "NONE",
    bias: bool = True,
    out: tuple[int, int] | None = None,
    seed: int = 0,
) -> bytes:
    rng = np.random.default_rng(seed)
    if out is None:
        out = (
            (ih * stride[0], iw * stride[1])
            if pad == "SAME"
            else ((ih - 1) * stride[0] + kh, (iw - 1) * stride[1] + kw)
        )
    mb = ModelBuilder()
    x = mb.input("x", (b, ih, iw, ic))
    shape = mb.const("shape", np.array([b, *out, oc], np.int32))
    w = mb.const("w", rng.standard_normal((oc, kh, kw, ic)).astype(np.float32))
    ins = [shape, w, x]
    if bias:
        ins.append(mb.const("b", rng.standard_normal(oc).astype(np.float32)))
    options = {"padding": pad, "stride_h": stride[0], "stride_w": stride[1]}
    if act != "NONE":
        options["fused_activation_function"] = act
    mb.output(mb.op("TRANSPOSE_CONV", ins, (b, *out, oc), options))
    return mb.build()


def mediapipe_model(
    b: int,
    ih: int,
    iw: int,
    ic: int,
    oc: int,
    kh: int,
    kw: int,
    stride=(2, 2),
    padding: int = 1,
    options: bytes | None = None,
    seed: int = 0,
) -> bytes:
    """padding 1 = SAME, 2 = VALID (TfLitePadding); options: (padding, stride_w, stride_h) int32."""
    rng = np.random.default_rng(seed)
    th = max(0, kh - (ih - 1) % stride[0] - 1) if padding == 1 else 0
    tw = max(0, kw - (iw - 1) % stride[1] - 1) if padding == 1 else 0
    out = (b, stride[0] * (ih - 1) + kh - th, stride[1] * (iw - 1) + kw - tw, oc)
    mb = ModelBuilder()
    x = mb.input("x", (b, ih, iw, ic))
    w = mb.const("w", rng.standard_normal((oc, kh, kw, ic)).astype(np.float32))
    bias = mb.const("b", rng.standard_normal(oc).astype(np.float32))
    raw = options if options is not None else struct.pack("<3i", padding, stride[1], stride[0])
    mb.output(mb.op("Convolution2DTransposeBias", [x, w, bias], out, custom_options=raw))
    return mb.build()


@st.composite
def tconv_case(draw):
    return dict(
        b=draw(st.integers(1, 2)),
        ih=draw(st.integers(1, 7)),
        iw=draw(st.integers(1, 7)),
        ic=draw(st.sampled_from(CHANNELS)),
        oc=draw(st.sampled_from(CHANNELS)),
        kh=draw(st.integers(1, 5)),
        kw=draw(st.integers(1, 5)),
        stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
    )


@given(
    tconv_case(),
    st.sampled_from(["SAME", "VALID"]),
    st.sampled_from(["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]),
    st.booleans(),
)
def test_transpose_conv(case, pad, act, bias):
    model = tconv_model(**case, pad=pad, act=act, bias=bias)
    graph = read_model(model).main
    assert registry.kernel_for(graph.ops[0]).build(graph.ops[0], graph)[0].shader == "transpose_conv"
    assert_matches_litert(model)


@given(tconv_case(), st.data())
def test_transpose_conv_output_size(case, data):
    """Every output size TFLite accepts: SAME padding is derived from output_shape, not from the input."""
    pad = data.draw(st.sampled_from(["SAME", "VALID"]))
    (sh, sw), k = case["stride"], (case["kh"], case["kw"])
    base = [
        (n - 1) * s + 1 if pad == "SAME" else (n - 1) * s + kk
        for n, s, kk in zip((case["ih"], case["iw"]), (sh, sw), k)
    ]
    out = (base[0] + data.draw(st.integers(0, sh - 1)), base[1] + data.draw(st.integers(0, sw - 1)))
    assert_matches_litert(tconv_model(**case, pad=pad, out=out))


def test_transpose_conv_rejects_inconsistent_output_shape():
    model = tconv_model(1, 2, 2, 3, 2, 1, 1, out=(1, 2))
    assert "does not fit" in (support_reason(model) or "")


@given(
    tconv_case().filter(lambda c: c["stride"][0] <= c["kh"] and c["stride"][1] <= c["kw"]),
    st.sampled_from([1, 2]),
)
def test_mediapipe_transpose_conv_bias(case, padding):
    """LiteRT runs the custom op only through XNNPACK, which needs stride <= kernel: the oracle's domain."""
    assert_matches_litert(mediapipe_model(**case, padding=padding))


def mediapipe_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride, padding: int) -> np.ndarray:
    """MediaPipe's scatter loop, in numpy."""
    b, ih, iw, _ = x.shape
    oc, kh, kw, _ = w.shape
    th = max(0, kh - (ih - 1) % stride[0] - 1) if padding == 1 else 0
    tw = max(0, kw - (iw - 1) % stride[1] - 1) if padding == 1 else 0
    oh, ow = stride[0] * (ih - 1) + kh - th, stride[1] * (iw - 1) + kw - tw
    full = np.zeros((b, stride[0] * (ih - 1) + kh, stride[1] * (iw - 1) + kw, oc), np.float64)
    for iy in range(ih):
        for ix in range(iw):
            contrib = np.einsum("bi,okli->bklo", x[:, iy, ix, :], w)
            full[:, iy * stride[0] : iy * stride[0] + kh, ix * stride[1] : ix * stride[1] + kw, :] += contrib
    return (full[:, th // 2 : th // 2 + oh, tw // 2 : tw // 2 + ow, :] + bias).astype(np.float32)


@given(tconv_case(), st.sampled_from([1, 2]))
def test_mediapipe_transpose_conv_bias_numpy(case, padding):
    """The whole stride/kernel space (beyond XNNPACK's) against a numpy rendering of MediaPipe's loop."""
    model = mediapipe_model(**case, padding=padding)
    graph = read_model(model).main
    x = np.random.default_rng(5).uniform(-1, 1, graph.tensors[0].shape).astype(np.float32)
    want = mediapipe_reference(x, graph.tensors[1].data, graph.tensors[2].data, case["stride"], padding)
    got, it = run_gpuengine(model, {0: x})
    (have,) = got.values()
    assert relative_error(have, want) <= tolerance(it, 1e-4)


def test_mediapipe_selfie_options():
    """selfie_segmentation's options: SAME, stride 2x2."""
    model = mediapipe_model(1, 8, 8, 16, 8, 2, 2, options=b"\x01\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00")
    assert support_reason(model) is None
    assert_matches_litert(model)


def test_rejects_malformed_custom_options():
    model = mediapipe_model(1, 4, 4, 3, 2, 2, 2, options=b"\x01\x00\x00\x00")
    assert "custom options" in (support_reason(model) or "")


def test_rejects_non_constant_output_shape():
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 3, 2))
    shape = mb.input("shape", (4,), np.int32)
    w = mb.const("w", np.ones((3, 3, 3, 2), np.float32))
    mb.output(
        mb.op(
            "TRANSPOSE_CONV", [shape, w, x], (1, 6, 6, 3), {"padding": "SAME", "stride_h": 2, "stride_w": 2}
        )
    )
    assert "output_shape" in (support_reason(mb.build()) or "")
