"""DEPTHWISE_CONV_2D against LiteRT: general kernel (any kernel 1..5, stride 1..3, dilation 1..2, multiplier
1..4) and the unrolled 3x3 stride 1 / stride 2 kernel; both paddings, fused activations, odd channels."""

from __future__ import annotations

import numpy as np
from helpers import FUSED_ACTIVATIONS, assert_matches_litert, lowering, support_reason
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ops import out_size

CHANNELS = [1, 3, 4, 5, 7, 8, 13]


def dw_model(
    b: int,
    ih: int,
    iw: int,
    ic: int,
    mult: int,
    kh: int,
    kw: int,
    stride=(1, 1),
    dil=(1, 1),
    pad: str = "SAME",
    act: str = "NONE",
    seed: int = 0,
) -> bytes:
    rng = np.random.default_rng(seed)
    oc = ic * mult
    mb = ModelBuilder()
    x = mb.input("x", (b, ih, iw, ic))
    w = mb.const("w", rng.standard_normal((1, kh, kw, oc)).astype(np.float32))
    bias = mb.const("b", rng.standard_normal(oc).astype(np.float32))
    p = 0 if pad == "SAME" else 1
    shape = (b, out_size(p, ih, kh, stride[0], dil[0]), out_size(p, iw, kw, stride[1], dil[1]), oc)
    mb.output(
        mb.op(
            "DEPTHWISE_CONV_2D",
            [x, w, bias],
            shape,
            {
                "padding": pad,
                "stride_h": stride[0],
                "stride_w": stride[1],
                "dilation_h_factor": dil[0],
                "dilation_w_factor": dil[1],
                "fused_activation_function": act,
                "depth_multiplier": mult,
            },
        )
    )
    return mb.build()


@st.composite
def dw_case(draw):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = draw(st.sampled_from(["SAME", "VALID"]))
    ih, iw = draw(st.integers(1, 13)), draw(st.integers(1, 13))
    if pad == "VALID":
        ih, iw = max(ih, (kh - 1) * dil[0] + 1), max(iw, (kw - 1) * dil[1] + 1)
    return dict(
        b=draw(st.integers(1, 2)),
        ih=ih,
        iw=iw,
        ic=draw(st.sampled_from(CHANNELS)),
        mult=draw(st.sampled_from([1, 1, 2, 3, 4])),
        kh=kh,
        kw=kw,
        stride=stride,
        dil=dil,
        pad=pad,
        act=draw(st.sampled_from(FUSED_ACTIVATIONS)),
    )


@given(dw_case())
def test_depthwise(case):
    assert_matches_litert(dw_model(**case))


@given(
    st.integers(1, 2),
    st.integers(1, 17),
    st.integers(1, 17),
    st.sampled_from(CHANNELS),
    st.sampled_from([1, 2]),
    st.sampled_from(["SAME", "VALID"]),
    st.sampled_from(FUSED_ACTIVATIONS),
)
def test_depthwise_3x3(b, h, w, c, stride, pad, act):
    h, w = (max(h, 3), max(w, 3)) if pad == "VALID" else (h, w)
    model = dw_model(b, h, w, c, 1, 3, 3, stride=(stride, stride), pad=pad, act=act)
    (spec,) = lowering(model)
    assert spec.shader == "depthwise_3x3"
    assert_matches_litert(model)


@given(st.sampled_from([1, 2, 3, 5]), st.sampled_from([2, 3, 4, 8]), st.integers(1, 3))
def test_depth_multiplier(c, mult, k):
    """Output channel ic * M + m reads input channel ic (lanes gathered, or splatted when 4 | M)."""
    model = dw_model(1, 7, 6, c, mult, k, k)
    (spec,) = lowering(model)
    assert spec.shader == "depthwise"
    assert_matches_litert(model)


def test_variant_selection():
    assert lowering(dw_model(1, 8, 8, 8, 1, 3, 3))[0].shader == "depthwise_3x3"
    assert lowering(dw_model(1, 8, 8, 8, 1, 3, 3, stride=(2, 2)))[0].shader == "depthwise_3x3"
    assert lowering(dw_model(1, 8, 8, 8, 1, 3, 3, stride=(1, 2)))[0].shader == "depthwise"
    assert lowering(dw_model(1, 8, 8, 8, 1, 3, 3, dil=(2, 2)))[0].shader == "depthwise"
    assert lowering(dw_model(1, 8, 8, 8, 1, 5, 5))[0].shader == "depthwise"


@given(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(1, 2))
def test_merged_pad(top, bottom, left, right, stride):
    rng = np.random.default_rng(2)
    mb = ModelBuilder()
    x = mb.input("x", (1, 7, 6, 5))
    p = mb.const("p", np.array([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32))
    xp = mb.op("PAD", [x, p], (1, 7 + top + bottom, 6 + left + right, 5))
    w = mb.const("w", rng.standard_normal((1, 3, 3, 5)).astype(np.float32))
    bias = mb.const("b", rng.standard_normal(5).astype(np.float32))
    shape = (1, out_size(1, 7 + top + bottom, 3, stride), out_size(1, 6 + left + right, 3, stride), 5)
    mb.output(
        mb.op(
            "DEPTHWISE_CONV_2D",
            [xp, w, bias],
            shape,
            {"padding": "VALID", "stride_h": stride, "stride_w": stride, "depth_multiplier": 1},
        )
    )
    it = assert_matches_litert(mb.build(), optimize=True)  # the merge is what is tested
    if top + bottom + left + right:
        labels = [d.spec.label for prog in it.compiled.programs for d in prog.dispatches]
        assert not any("PAD" in label for label in labels), labels


def test_tanh_activation_falls_back():
    model = dw_model(1, 5, 5, 3, 1, 3, 3, act="TANH")
    assert "TANH" in (support_reason(model) or "")
    assert_matches_litert(model, all_gpu=False)
