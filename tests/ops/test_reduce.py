"""MEAN / SUM / REDUCE_MAX / REDUCE_MIN / REDUCE_PROD vs LiteRT: every axes subset, keep_dims, ranks 1-4."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

OPS = ["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"]


def reduce_model(code: str, shape: tuple[int, ...], axes: list[int], keep_dims: bool,
                 const_axes: bool = True) -> bytes:
    rank = len(shape)
    norm = {a % rank for a in axes}
    out = tuple(1 if i in norm else d for i, d in enumerate(shape)) if keep_dims else \
        tuple(d for i, d in enumerate(shape) if i not in norm)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    if const_axes:
        ax = mb.const("axes", np.array(axes, np.int32))
    else:
        ax = mb.input("axes", (len(axes),), np.int32)
    y = mb.op(code, [x, ax], out, {"keep_dims": keep_dims})
    mb.output(y)
    return mb.build()


@st.composite
def reduce_case(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 7])) for _ in range(rank - 1))
    shape += (draw(st.sampled_from([1, 3, 4, 5, 7, 9])),)
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    axes = [a - rank if draw(st.booleans()) else a for a in axes]  # negative axes too
    return draw(st.sampled_from(OPS)), shape, axes, draw(st.booleans())


@given(reduce_case())
def test_reduce_random(case):
    code, shape, axes, keep = case
    assert_matches_litert(reduce_model(code, shape, axes, keep))


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("axes", [list(c) for r in range(1, 5) for c in itertools.combinations(range(4), r)])
def test_reduce_all_axes_rank4(axes, keep):
    # Rotate ops across the subsets so each op sees channel-kept and channel-reduced cases.
    code = OPS[(sum(axes) + len(axes) + keep) % len(OPS)]
    assert_matches_litert(reduce_model(code, (2, 3, 5, 7), axes, keep), seed=len(axes))


@pytest.mark.parametrize("code", ["MEAN", "REDUCE_MAX"])
def test_global_pool_large_extent(code):
    """1x64x64x3 over H,W: 4096 reads for one output vec4, which a discrete GPU splits over a workgroup."""
    model = reduce_model(code, (1, 64, 64, 3), [1, 2], True)
    it = assert_matches_litert(model, target="discrete")
    assert [s.decomposition.split for s in it.compiled.programs[0].info.specs if s.shader == "reduce"] == [256]


def test_large_channel_reduction():
    assert_matches_litert(reduce_model("SUM", (2, 1000), [-1], False))
    assert_matches_litert(reduce_model("MEAN", (1, 9, 11, 37), [1, 2, 3], False))


def test_runtime_axes_fall_back():
    model = reduce_model("MEAN", (1, 4, 4, 3), [1, 2], False, const_axes=False)
    graph = read_model(model).main
    reason = registry.check(graph.ops[0], graph)
    assert reason and "constant" in reason
    feeds = {0: np.random.default_rng(0).uniform(-1, 1, (1, 4, 4, 3)).astype(np.float32),
             1: np.array([1, 2], np.int32)}
    assert_matches_litert(model, feeds, all_gpu=False)


@pytest.mark.parametrize("shape", [(1, 5, 6, 7), (1, 40, 40, 5)])
def test_fused_consumer(shape):
    """MEAN(keep_dims) + ADD + RELU6, serial and workgroup paths (consumers may fuse into the epilogue)."""
    out = (shape[0], 1, 1, shape[3])
    mb = ModelBuilder()
    x = mb.input("x", shape)
    bias = mb.input("bias", out)
    y = mb.op("MEAN", [x, mb.const("axes", np.array([1, 2], np.int32))], out, {"keep_dims": True})
    z = mb.op("ADD", [y, bias], out)
    mb.output(mb.op("RELU6", [z], out))
    assert_matches_litert(mb.build())


def test_duplicate_and_negative_axes():
    """[1, -3] name the same axis of a rank-4 tensor twice; it is reduced once."""
    assert_matches_litert(reduce_model("SUM", (2, 5, 3, 6), [1, -3], False))
    assert_matches_litert(reduce_model("REDUCE_MIN", (4, 6, 5), [-1, 2, 0], True))
