"""DEPTH_TO_SPACE / SPACE_TO_DEPTH against LiteRT (TFLite DCR order): block sizes 1-3, odd channel counts."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, random_inputs
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model


def model(code: str, shape: tuple[int, int, int, int], block: int, dtype=np.float32) -> bytes:
    b, h, w, c = shape
    out = (b, h * block, w * block, c // block ** 2) if code == "DEPTH_TO_SPACE" else \
        (b, h // block, w // block, c * block ** 2)
    mb = ModelBuilder()
    x = mb.input("x", shape, dtype)
    y = mb.op(code, [x], out, {"block_size": block}, dtype=dtype)
    mb.output(y)
    return mb.build()


@given(st.integers(1, 3), st.integers(1, 2), st.integers(1, 5), st.integers(1, 5),
       st.sampled_from([1, 2, 3, 4, 5, 7, 8]))
def test_depth_to_space(block, b, h, w, c_out):
    assert_matches_litert(model("DEPTH_TO_SPACE", (b, h, w, c_out * block * block), block))


@given(st.integers(1, 3), st.integers(1, 2), st.integers(1, 5), st.integers(1, 5),
       st.sampled_from([1, 2, 3, 4, 5, 7, 8]))
def test_space_to_depth(block, b, h, w, c_in):
    assert_matches_litert(model("SPACE_TO_DEPTH", (b, h * block, w * block, c_in), block))


def test_round_trip_chain():
    """SPACE_TO_DEPTH then DEPTH_TO_SPACE on the GPU, lane-gather (C=3) and whole-vec4 (C=4) paths."""
    for c in (3, 4):
        mb = ModelBuilder()
        x = mb.input("x", (1, 6, 4, c))
        a = mb.op("SPACE_TO_DEPTH", [x], (1, 3, 2, 4 * c), {"block_size": 2})
        y = mb.op("DEPTH_TO_SPACE", [a], (1, 6, 4, c), {"block_size": 2})
        mb.output(y)
        assert_matches_litert(mb.build())


def test_integer_input_falls_back():
    data = model("DEPTH_TO_SPACE", (1, 2, 2, 8), 2, np.int32)
    graph = read_model(data).main
    assert "float32" in registry.check(graph.ops[0], graph)
    feeds = {t: v * 7 for t, v in random_inputs(data).items()}
    assert_matches_litert(data, feeds, all_gpu=False)
