"""CONV_2D against LiteRT: general / 1x1 / first-layer variants, kernel 1..5, stride 1..3, dilation 1..2, both
paddings, fused activations, odd channel counts, batches, groups, a merged PAD, and the absent bias."""

from __future__ import annotations

import numpy as np
from helpers import (
    FUSED_ACTIVATIONS,
    assert_matches_litert,
    lowering,
    random_inputs,
    relative_error,
    run_gpuengine,
    run_litert,
    support_reason,
    tolerance,
)
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ops import out_size

CHANNELS = [1, 3, 5, 7, 8, 12]


def conv_model(
    b: int,
    ih: int,
    iw: int,
    ic: int,
    oc: int,
    kh: int,
    kw: int,
    stride=(1, 1),
    dil=(1, 1),
    pad: str = "SAME",
    act: str = "NONE",
    groups: int = 1,
    bias: str = "random",
    seed: int = 0,
) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", (b, ih, iw, ic))
    w = mb.const("w", rng.standard_normal((oc, kh, kw, ic // groups)).astype(np.float32))
    ins = [x, w]
    if bias != "absent":
        values = rng.standard_normal(oc) if bias == "random" else np.zeros(oc)
        ins.append(mb.const("b", values.astype(np.float32)))
    p = 0 if pad == "SAME" else 1
    shape = (b, out_size(p, ih, kh, stride[0], dil[0]), out_size(p, iw, kw, stride[1], dil[1]), oc)
    mb.output(
        mb.op(
            "CONV_2D",
            ins,
            shape,
            {
                "padding": pad,
                "stride_h": stride[0],
                "stride_w": stride[1],
                "dilation_h_factor": dil[0],
                "dilation_w_factor": dil[1],
                "fused_activation_function": act,
            },
        )
    )
    return mb.build()


@st.composite
def conv_case(draw, channels=CHANNELS):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = draw(st.sampled_from(["SAME", "VALID"]))
    ih, iw = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    if pad == "VALID":  # the dilated kernel must fit
        ih, iw = max(ih, (kh - 1) * dil[0] + 1), max(iw, (kw - 1) * dil[1] + 1)
    return dict(
        b=draw(st.integers(1, 2)),
        ih=ih,
        iw=iw,
        ic=draw(st.sampled_from(channels)),
        oc=draw(st.sampled_from([1, 3, 5, 7, 9])),
        kh=kh,
        kw=kw,
        stride=stride,
        dil=dil,
        pad=pad,
        act=draw(st.sampled_from(FUSED_ACTIVATIONS)),
    )


@given(conv_case())
def test_conv2d(case):
    assert_matches_litert(conv_model(**case))


@given(conv_case(channels=[1, 2, 3, 4]))
def test_conv2d_first_layer(case):
    """One input slice: the unrolled first-layer kernel (unless the 1x1 GEMM applies)."""
    model = conv_model(**case)
    (spec,) = lowering(model)
    assert spec.shader in ("conv2d_first", "conv2d_1x1")
    assert_matches_litert(model)


@given(
    st.integers(1, 2),
    st.integers(1, 9),
    st.integers(1, 9),
    st.sampled_from(CHANNELS),
    st.sampled_from([1, 3, 5, 7, 9, 16]),
    st.sampled_from(FUSED_ACTIVATIONS),
    st.sampled_from(["SAME", "VALID"]),
)
def test_conv2d_1x1(b, h, w, ic, oc, act, pad):
    model = conv_model(b, h, w, ic, oc, 1, 1, act=act, pad=pad)
    (spec,) = lowering(model)
    assert spec.shader == "conv2d_1x1"
    assert_matches_litert(model)


def test_variant_selection():
    assert lowering(conv_model(1, 8, 8, 16, 8, 1, 1))[0].shader == "conv2d_1x1"
    assert lowering(conv_model(1, 8, 8, 16, 8, 1, 1, stride=(2, 2)))[0].shader == "conv2d"
    assert lowering(conv_model(1, 8, 8, 3, 8, 3, 3, stride=(2, 2)))[0].shader == "conv2d_first"
    assert lowering(conv_model(1, 8, 8, 5, 8, 3, 3))[0].shader == "conv2d"
    spec = lowering(conv_model(1, 8, 8, 5, 8, 3, 3))[0]
    assert next(b for b in spec.bindings if b.name == "weights").element == "SM"  # mat4x4 in storage precision


@given(
    st.sampled_from([(4, 2), (6, 3), (8, 2), (9, 3), (8, 4)]),
    st.sampled_from([2, 4, 6]),
    st.integers(1, 3),
    st.sampled_from(["SAME", "VALID"]),
)
def test_grouped_conv(ic_groups, per_group, k, pad):
    ic, groups = ic_groups
    assert_matches_litert(conv_model(1, 6, 5, ic, groups * per_group, k, k, pad=pad, groups=groups))


def test_absent_bias():
    """LiteRT 2.3 refuses a float CONV_2D without bias, so compare with its zero-bias twin."""
    case = dict(b=1, ih=7, iw=6, ic=5, oc=7, kh=3, kw=2, stride=(2, 1), act="RELU")
    feeds = random_inputs(conv_model(**case, bias="zero"))
    ref = run_litert(conv_model(**case, bias="zero"), feeds)
    got, it = run_gpuengine(conv_model(**case, bias="absent"), feeds)
    (want,), (have,) = ref.values(), got.values()
    assert relative_error(have, want) <= tolerance(it, 1e-4)


@given(
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(0, 2),
    st.integers(1, 2),
    st.sampled_from([3, 5, 8]),
)
def test_merged_pad(top, bottom, left, right, stride, ic):
    """PAD + VALID conv becomes one conv with explicit padding (merge_padding asks supports() first)."""
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 7, ic))
    p = mb.const("p", np.array([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32))
    xp = mb.op("PAD", [x, p], (1, 6 + top + bottom, 7 + left + right, ic))
    w = mb.const("w", rng.standard_normal((5, 3, 3, ic)).astype(np.float32))
    bias = mb.const("b", rng.standard_normal(5).astype(np.float32))
    shape = (1, out_size(1, 6 + top + bottom, 3, stride), out_size(1, 7 + left + right, 3, stride), 5)
    mb.output(
        mb.op("CONV_2D", [xp, w, bias], shape, {"padding": "VALID", "stride_h": stride, "stride_w": stride})
    )
    it = assert_matches_litert(mb.build(), optimize=True)  # the merge is what is tested
    if top + bottom + left + right:
        labels = [d.spec.label for prog in it.compiled.programs for d in prog.dispatches]
        assert not any("PAD" in label for label in labels), labels


def test_tanh_activation_falls_back():
    """LiteRT's CPU CONV_2D ignores a fused TANH: the GPU refuses it with a reason; the CPU runs it."""
    model = conv_model(1, 5, 5, 3, 4, 3, 3, act="TANH")
    assert "TANH" in (support_reason(model) or "")
    assert_matches_litert(model, all_gpu=False)


def test_rejects_non_constant_weights():
    mb = ModelBuilder()
    x = mb.input("x", (1, 5, 5, 3))
    w = mb.input("w", (4, 3, 3, 3))
    b = mb.const("b", np.zeros(4, np.float32))
    mb.output(mb.op("CONV_2D", [x, w, b], (1, 5, 5, 4), {"padding": "SAME", "stride_h": 1, "stride_w": 1}))
    model = mb.build()
    assert "constant" in (support_reason(model) or "")
    assert_matches_litert(model, all_gpu=False)
