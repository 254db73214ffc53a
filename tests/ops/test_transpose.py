"""TRANSPOSE against LiteRT: every permutation of ranks 1-4, odd channel counts, vec4 and per-lane paths."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, lowering
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

DIMS = [1, 2, 3, 4, 5, 7, 8]


def transpose_model(shape: tuple[int, ...], perm: list[int], const: bool = False) -> bytes:
    out = tuple(shape[p] for p in perm)
    mb = ModelBuilder()
    x = mb.const("c", np.random.default_rng(2).normal(size=shape).astype(np.float32)) if const \
        else mb.input("x", shape)
    y = mb.op("TRANSPOSE", [x, mb.const("perm", np.array(perm, np.int32))], out)
    if const:
        y = mb.op("MUL", [y, mb.input("z", out)], out)
    mb.output(y)
    return mb.build()


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.data())
def test_transpose(shape, data):
    perm = data.draw(st.permutations(list(range(len(shape)))))
    assert_matches_litert(transpose_model(tuple(shape), perm))


@given(st.lists(st.sampled_from(DIMS), min_size=2, max_size=4), st.data())
def test_transpose_constant(shape, data):
    perm = data.draw(st.permutations(list(range(len(shape)))))
    assert_matches_litert(transpose_model(tuple(shape), perm, const=True))


def test_vec4_path_when_channels_stay():
    model = transpose_model((2, 3, 5, 8), [0, 2, 1, 3])
    assert "vec4" in lowering(model)[0].label
    assert_matches_litert(model)
    model = transpose_model((2, 3, 5, 7), [0, 3, 1, 2])
    assert "vec4" not in lowering(model)[0].label
    assert_matches_litert(model)


def test_nhwc_to_nchw_like():
    assert_matches_litert(transpose_model((1, 7, 9, 5), [0, 3, 1, 2]))
    assert_matches_litert(transpose_model((3, 17), [1, 0]))


def test_bad_perm_rejected():
    mb = ModelBuilder()
    x = mb.input("x", (2, 3))
    p = mb.input("perm", (2,), np.int32)
    mb.output(mb.op("TRANSPOSE", [x, p], (3, 2)))
    model = mb.build()
    graph = read_model(model).main
    assert "constant" in (registry.check(graph.ops[0], graph) or "")
    feeds = {0: np.arange(6, dtype=np.float32).reshape(2, 3), 1: np.array([1, 0], np.int32)}
    assert_matches_litert(model, feeds, all_gpu=False)
