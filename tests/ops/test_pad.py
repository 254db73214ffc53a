"""PAD / PADV2 / MIRROR_PAD against LiteRT: ranks 1-4, any axis padded (channels too), both mirror modes."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, support_reason
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder

CHANNELS = [1, 3, 4, 5, 7, 8, 9]


def pad_model(code: str, shape: tuple[int, ...], pads: list[tuple[int, int]], mode: int = 0,
              value: float | None = None, value_input: bool = False) -> bytes:
    out = tuple(d + a + b for d, (a, b) in zip(shape, pads))
    mb = ModelBuilder()
    x = mb.input("x", shape)
    ins = [x, mb.const("paddings", np.array(pads, np.int32).reshape(len(shape), 2))]
    if code == "PADV2":
        ins.append(mb.input("value", ()) if value_input else mb.const("value", np.array(value, np.float32)))
    y = mb.op(code, ins, out, {"mode": mode} if code == "MIRROR_PAD" else None)
    mb.output(y)
    return mb.build()


@st.composite
def pad_case(draw, mirror: bool):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank - 1)) + (draw(st.sampled_from(CHANNELS)),)
    mode = draw(st.sampled_from([0, 1])) if mirror else 0
    channel_pad = draw(st.booleans())  # both the whole-vec4 path and the lane-gather path
    pads = []
    for axis, n in enumerate(shape):
        limit = (n - 1 if mode == 0 else n) if mirror else 3
        if axis == rank - 1 and not channel_pad:
            limit = 0
        pads.append((draw(st.integers(0, min(limit, 5))), draw(st.integers(0, min(limit, 5)))))
    return shape, pads, mode


@given(pad_case(mirror=False), st.sampled_from(["PAD", "PADV2"]), st.sampled_from([0.0, -2.5, 7.0]))
def test_constant_pad(case, code, value):
    shape, pads, _ = case
    assert_matches_litert(pad_model(code, shape, pads, value=value))


@given(pad_case(mirror=True))
def test_mirror_pad(case):
    shape, pads, mode = case
    assert_matches_litert(pad_model("MIRROR_PAD", shape, pads, mode))


def test_spatial_pad_nhwc():
    """The common case (spatial padding only, as before a VALID conv) with odd channels."""
    assert_matches_litert(pad_model("PAD", (2, 9, 7, 5), [(0, 0), (1, 2), (3, 0), (0, 0)]))
    assert_matches_litert(pad_model("MIRROR_PAD", (1, 9, 7, 7), [(0, 0), (3, 3), (2, 2), (0, 0)], mode=0))


def test_pad_chain():
    """Two pads in one GPU partition: the second reads the first's PHWC4 output, padding lanes included."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 5, 3))
    a = mb.op("PAD", [x, mb.const("p1", np.array([[0, 0], [1, 1], [0, 0], [2, 1]], np.int32))], (1, 6, 5, 6))
    b = mb.op("MIRROR_PAD", [a, mb.const("p2", np.array([[0, 0], [2, 0], [1, 2], [1, 0]], np.int32))],
              (1, 8, 8, 7), {"mode": 1})
    mb.output(b)
    assert_matches_litert(mb.build())


def test_unsupported_variants_fall_back():
    rank5 = pad_model("PAD", (1, 2, 3, 2, 3), [(0, 0), (1, 0), (0, 1), (1, 1), (0, 0)])
    assert "rank 5" in support_reason(rank5)
    assert_matches_litert(rank5, all_gpu=False)
    dynamic_value = pad_model("PADV2", (1, 3, 3, 2), [(0, 0), (1, 1), (1, 1), (0, 0)], value_input=True)
    assert "pad value" in support_reason(dynamic_value)
    assert_matches_litert(dynamic_value, all_gpu=False)
    too_far = pad_model("MIRROR_PAD", (1, 3, 3, 2), [(0, 0), (3, 0), (0, 0), (0, 0)], mode=0)
    assert "exceeds" in support_reason(too_far)
