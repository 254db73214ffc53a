"""SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND against LiteRT: 4-D NHWC, [2] block shapes, paddings and crops."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

CHANNELS = [1, 3, 4, 5, 7, 8]


def s2b_shape(shape, block, pads):
    b, h, w, c = shape
    return (b * block[0] * block[1], (h + pads[0][0] + pads[0][1]) // block[0],
            (w + pads[1][0] + pads[1][1]) // block[1], c)


def b2s_shape(shape, block, crops):
    b, h, w, c = shape
    return (b // (block[0] * block[1]), h * block[0] - crops[0][0] - crops[0][1],
            w * block[1] - crops[1][0] - crops[1][1], c)


def model(code: str, shape, block, pads) -> bytes:
    out = (s2b_shape if code == "SPACE_TO_BATCH_ND" else b2s_shape)(shape, block, pads)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.op(code, [x, mb.const("block", np.array(block, np.int32)),
                     mb.const("pads", np.array(pads, np.int32).reshape(-1, 2))], out)
    mb.output(y)
    return mb.build()


@st.composite
def s2b_case(draw):
    block = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pads, dims = [], []
    for bs in block:
        before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        least = -(-(before + after + 1) // bs)  # at least one input row/column remains
        out = draw(st.integers(least, max(least, 4)))
        pads.append((before, after))
        dims.append(out * bs - before - after)
    shape = (draw(st.integers(1, 2)), dims[0], dims[1], draw(st.sampled_from(CHANNELS)))
    return shape, block, pads


@st.composite
def b2s_case(draw):
    block = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    crops, dims = [], []
    for bs in block:
        n = draw(st.integers(1, 4))
        before = draw(st.integers(0, min(2, n * bs - 1)))
        after = draw(st.integers(0, min(2, n * bs - 1 - before)))
        crops.append((before, after))
        dims.append(n)
    shape = (draw(st.integers(1, 2)) * block[0] * block[1], dims[0], dims[1], draw(st.sampled_from(CHANNELS)))
    return shape, block, crops


@given(s2b_case())
def test_space_to_batch(case):
    assert_matches_litert(model("SPACE_TO_BATCH_ND", *case))


@given(b2s_case())
def test_batch_to_space(case):
    assert_matches_litert(model("BATCH_TO_SPACE_ND", *case))


def test_dilated_conv_wrapper_chain():
    """SPACE_TO_BATCH_ND -> BATCH_TO_SPACE_ND as TFLite wraps dilated convolutions, in one GPU partition."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 7, 6, 5))
    block = mb.const("block", np.array([2, 2], np.int32))
    a = mb.op("SPACE_TO_BATCH_ND", [x, block, mb.const("pads", np.array([[1, 2], [2, 0]], np.int32))],
              (4, 5, 4, 5))
    y = mb.op("BATCH_TO_SPACE_ND", [a, block, mb.const("crops", np.array([[1, 2], [2, 0]], np.int32))],
              (1, 7, 6, 5))
    mb.output(y)
    assert_matches_litert(mb.build())


def test_3d_input_falls_back():
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 3))
    y = mb.op("SPACE_TO_BATCH_ND", [x, mb.const("block", np.array([2], np.int32)),
                                    mb.const("pads", np.array([[1, 1]], np.int32))], (2, 4, 3))
    mb.output(y)
    data = mb.build()
    graph = read_model(data).main
    assert "4-D" in registry.check(graph.ops[0], graph)
    assert_matches_litert(data, all_gpu=False)
