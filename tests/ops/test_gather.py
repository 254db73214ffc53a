"""GATHER with constant indices against LiteRT: ranks 1-4, every axis, indices of rank 0-2."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.testing import assert_matches_litert

DIMS = [1, 2, 3, 5, 7]


def gather_model(shape: tuple[int, ...], indices: np.ndarray, axis: int, batch_dims: int = 0,
                 indices_input: bool = False) -> bytes:
    a = axis % len(shape)
    out = shape[:a] + indices.shape[batch_dims:] + shape[a + 1:]  # TFLite: batch dims are shared, not repeated
    mb = ModelBuilder()
    x = mb.input("x", shape)
    i = mb.input("i", indices.shape, np.int32) if indices_input else mb.const("i", indices)
    options = {"axis": axis, "batch_dims": batch_dims} if batch_dims else {"axis": axis}
    mb.output(mb.op("GATHER", [x, i], out, options))
    return mb.build()


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.data())
def test_gather(shape, data):
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    q = data.draw(st.integers(0, 4 - rank + 1).map(lambda v: min(v, 2)))
    ishape = tuple(data.draw(st.integers(1, 4)) for _ in range(q))
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    indices = rng.integers(0, shape[axis], ishape).astype(dtype)
    assert_matches_litert(gather_model(tuple(shape), indices, axis))


def test_embedding_like_rows():
    """Rows of a [vocab, dim] table: whole vec4s move."""
    model = gather_model((11, 8), np.array([3, 0, 10, 3], np.int32), 0)
    graph = read_model(model).main
    assert "vec4" in registry.kernel_for(graph.ops[0]).build(graph.ops[0], graph)[0].label
    assert_matches_litert(model)


def test_scalar_index_gives_rank0():
    assert_matches_litert(gather_model((5,), np.array(3, np.int32), 0))
    assert_matches_litert(gather_model((2, 3, 7), np.array(6, np.int64), -1))


def test_unsupported_variants_fall_back():
    model = gather_model((2, 5), np.array([1, 0], np.int32), 1, indices_input=True)
    graph = read_model(model).main
    assert "constant" in (registry.check(graph.ops[0], graph) or "")
    feeds = {0: np.arange(10, dtype=np.float32).reshape(2, 5), 1: np.array([4, 2], np.int32)}
    assert_matches_litert(model, feeds, all_gpu=False)

    model = gather_model((2, 5), np.array([[1, 0], [4, 4]], np.int32), 1, batch_dims=1)
    graph = read_model(model).main
    assert "batch_dims" in (registry.check(graph.ops[0], graph) or "")
    assert_matches_litert(model, all_gpu=False)
