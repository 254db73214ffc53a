"""SPLIT, SPLIT_V and UNPACK against LiteRT: ranks 1-4, every axis (negative too), odd channel counts."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, lowering
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.lowering.kernels.base import Alias
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

DIMS = [1, 2, 3, 5, 7]


def split_model(shape: tuple[int, ...], axis: int, n: int) -> bytes:
    a = axis % len(shape)
    out = shape[:a] + (shape[a] // n,) + shape[a + 1:]
    mb = ModelBuilder()
    x = mb.input("x", shape)
    ys = mb.op("SPLIT", [mb.const("axis", np.array(axis, np.int32)), x], [out] * n, {"num_splits": n})
    mb.output(*ys)
    return mb.build()


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.integers(1, 4), st.data())
def test_split(shape, n, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape[axis] *= n
    assert_matches_litert(split_model(tuple(shape), axis, n))


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.data())
def test_split_v(shape, data):
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    shape[axis] = sum(sizes)
    given_sizes = list(sizes)
    if data.draw(st.booleans()):
        given_sizes[data.draw(st.integers(0, len(sizes) - 1))] = -1
    outs = [tuple(shape[:axis % rank]) + (s,) + tuple(shape[axis % rank + 1:]) for s in sizes]
    mb = ModelBuilder()
    x = mb.input("x", tuple(shape))
    ys = mb.op("SPLIT_V", [x, mb.const("sizes", np.array(given_sizes, np.int32)),
                           mb.const("axis", np.array([axis], np.int32))], outs, {"num_splits": len(sizes)})
    mb.output(*ys)
    assert_matches_litert(mb.build())


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.data())
def test_unpack(shape, data):
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    a = axis % rank
    out = tuple(shape[:a] + shape[a + 1:])
    mb = ModelBuilder()
    x = mb.input("x", tuple(shape))
    ys = mb.op("UNPACK", [x], [out] * shape[a], {"num": shape[a], "axis": axis})
    mb.output(*ys)
    assert_matches_litert(mb.build())


def test_channel_split_paths():
    model = split_model((1, 3, 3, 16), -1, 2)  # 8 channels each: vec4 copies
    assert all("vec4" in s.label for s in lowering(model))
    assert_matches_litert(model)
    model = split_model((2, 3, 9), 2, 3)  # 3 channels each: offsets 3 and 6 need lane gathers
    assert ["vec4" in s.label for s in lowering(model)] == [True, False, False]
    assert_matches_litert(model)


def test_single_split_is_alias():
    model = split_model((2, 3, 5), 1, 1)
    assert [type(x) for x in lowering(model)] == [Alias]
    assert_matches_litert(model)


def test_non_constant_axis_falls_back():
    mb = ModelBuilder()
    axis = mb.input("axis", (), np.int32)
    x = mb.input("x", (2, 4))
    ys = mb.op("SPLIT", [axis, x], [(2, 2), (2, 2)], {"num_splits": 2})
    mb.output(*ys)
    model = mb.build()
    graph = read_model(model).main
    assert "constant" in (registry.check(graph.ops[0], graph) or "")
    feeds = {0: np.array(1, np.int32), 1: np.arange(8, dtype=np.float32).reshape(2, 4)}
    assert_matches_litert(model, feeds, all_gpu=False)
