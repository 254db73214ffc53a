"""TILE against LiteRT: ranks 1-4, multiples on every axis, odd channel counts."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

DIMS = [1, 2, 3, 5, 7]


def tile_model(shape: tuple[int, ...], mult: list[int], dtype=np.int32) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", shape)
    out = tuple(d * m for d, m in zip(shape, mult))
    mb.output(mb.op("TILE", [x, mb.const("m", np.array(mult, dtype))], out))
    return mb.build()


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.data())
def test_tile(shape, data):
    mult = [data.draw(st.integers(1, 3)) for _ in shape]
    assert_matches_litert(tile_model(tuple(shape), mult))


def test_tile_int64_multiples():
    assert_matches_litert(tile_model((2, 1, 3), [1, 4, 2], np.int64))


def test_tile_non_constant_multiples_falls_back():
    mb = ModelBuilder()
    x = mb.input("x", (2, 3))
    m = mb.input("m", (2,), np.int32)
    mb.output(mb.op("TILE", [x, m], (4, 3)))
    model = mb.build()
    graph = read_model(model).main
    assert "constant" in (registry.check(graph.ops[0], graph) or "")
    feeds = {0: np.arange(6, dtype=np.float32).reshape(2, 3), 1: np.array([2, 1], np.int32)}
    assert_matches_litert(model, feeds, all_gpu=False)
