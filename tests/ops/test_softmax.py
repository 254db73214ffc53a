"""SOFTMAX (beta) / LOG_SOFTMAX / L2_NORMALIZATION over the last axis against LiteRT, ranks 1-4."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

OPS = ["SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION"]


def model(code: str, shape: tuple[int, ...], beta: float = 1.0) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.op(code, [x], shape, {"beta": beta} if code == "SOFTMAX" else None)
    mb.output(y)
    return mb.build()


@st.composite
def case(draw):
    rank = draw(st.integers(1, 4))
    channels = draw(st.sampled_from([1, 2, 3, 5, 7, 8, 19]))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank - 1)) + (channels,)
    return draw(st.sampled_from(OPS)), shape, draw(st.sampled_from([1.0, 0.5, 2.0, -1.0]))


@given(case())
def test_random(c):
    code, shape, beta = c
    feeds = {0: np.random.default_rng(3).uniform(-5, 5, shape).astype(np.float32)}
    assert_matches_litert(model(code, shape, beta), feeds)


@pytest.mark.parametrize("code", OPS)
def test_segmentation_head(code):
    """2 channels over a 32x32 map: one invocation per pixel, padding lanes 2..3 masked out."""
    feeds = {0: np.random.default_rng(4).uniform(-8, 8, (1, 32, 32, 2)).astype(np.float32)}
    it = assert_matches_litert(model(code, (1, 32, 32, 2)), feeds, target="discrete")
    assert [s.decomposition.split for s in it.compiled.programs[0].info.specs if s.shader == "softmax"] == [1]


@pytest.mark.parametrize("code", OPS)
def test_many_classes(code):
    """1000 classes at 1x1 (and 130 at 2x3): a discrete GPU splits each pixel's slices over a workgroup."""
    feeds = {0: np.random.default_rng(5).uniform(-20, 20, (1, 1000)).astype(np.float32)}
    it = assert_matches_litert(model(code, (1, 1000)), feeds, target="discrete")
    assert [s.decomposition.split for s in it.compiled.programs[0].info.specs if s.shader == "softmax"] == [64]
    assert_matches_litert(model(code, (2, 3, 130), 0.7), seed=1, target="discrete")
    assert_matches_litert(model(code, (2, 3, 130), 0.7), seed=1, target="cpu")


def test_large_logits_are_stable():
    feeds = {0: np.array([[1000.0, 999.0, -1000.0, 0.0, 1001.0]], np.float32)}
    for code in ("SOFTMAX", "LOG_SOFTMAX"):
        assert_matches_litert(model(code, (1, 5)), feeds)


def test_l2_norm_epsilon():
    """Tiny vectors are divided by TFLite's epsilon 1e-6, not by their norm."""
    feeds = {0: np.full((2, 5), 1e-8, np.float32)}
    feeds[0][1] = 0.0
    assert_matches_litert(model("L2_NORMALIZATION", (2, 5)), feeds, tol=1e-6)


def test_rank5_falls_back():
    m = model("SOFTMAX", (1, 2, 2, 2, 3))
    graph = read_model(m).main
    reason = registry.check(graph.ops[0], graph)
    assert reason and "rank 5" in reason
    assert_matches_litert(m, all_gpu=False)


@pytest.mark.parametrize("shape", [(1, 5, 4, 7), (1, 300)])
def test_fused_consumer(shape):
    """Consumers of softmax (fusable into its per-slice epilogue once elementwise offers as_epilogue)."""
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.op("SOFTMAX", [x], shape, {"beta": 1.0})
    z = mb.op("MUL", [y, mb.const("k", np.float32(3.0))], shape)
    mb.output(mb.op("ADD", [z, x], shape))
    assert_matches_litert(mb.build())
