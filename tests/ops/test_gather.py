"""GATHER against LiteRT: constant indices (ranks 1-4, every axis, indices of rank 0-2), run-time int32 indices
(token ids: any axis, batch_dims, scalar ids, int32 tables) read on the GPU."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

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


@pytest.mark.parametrize("shape,ishape,axis,batch_dims", [
    ((1000, 64), (1, 32), 0, 0),  # BERT word embeddings: [1, 32] token ids
    ((11, 6), (5,), 0, 0),  # width not a multiple of 4
    ((2, 5), (2,), 1, 0), ((3, 4, 7), (2, 2), -1, 0), ((2, 3, 4, 5), (3,), 2, 0),
    ((9,), (), 0, 0),  # a scalar id: rank-0 output
    ((2, 5), (2, 2), 1, 1), ((2, 3, 6, 4), (2, 3, 2), 2, 2), ((2, 6, 3), (2, 4), -2, -1),
])
def test_runtime_indices_on_the_gpu(shape, ishape, axis, batch_dims):
    rng = np.random.default_rng(len(shape) + len(ishape))
    indices = rng.integers(0, shape[axis], ishape).astype(np.int32)
    indices.reshape(-1)[0] = shape[axis] - 1  # the last row too
    model = gather_model(shape, indices, axis, batch_dims % max(len(ishape), 1), indices_input=True)
    graph = read_model(model).main
    assert registry.check(graph.ops[0], graph) is None
    feeds = {0: rng.standard_normal(shape).astype(np.float32), 1: indices}
    assert_matches_litert(model, feeds)


def test_runtime_indices_into_int32_table_and_constant_batch_dims():
    """An int32 table gathered by run-time ids stays exact; constant indices with batch_dims take the same kernel."""
    mb = ModelBuilder()
    table = mb.const("table", np.arange(40, dtype=np.int32).reshape(8, 5) * 3 - 50)
    ids = mb.input("ids", (4,), np.int32)
    mb.output(mb.op("GATHER", [table, ids], (4, 5), {"axis": 0}, dtype=np.int32))
    assert_matches_litert(mb.build(), {ids: np.array([7, 0, 3, 3], np.int32)})

    model = gather_model((2, 5), np.array([[1, 0], [4, 4]], np.int64), 1, batch_dims=1)
    graph = read_model(model).main
    assert registry.check(graph.ops[0], graph) is None
    assert_matches_litert(model)


def test_unsupported_variants_fall_back():
    """Run-time int64 indices stay on LiteRT (int64 tensors do not live on the GPU), and say so."""
    mb = ModelBuilder()
    x = mb.input("x", (2, 5))
    i = mb.input("i", (2,), np.int64)
    mb.output(mb.op("GATHER", [x, i], (2, 2), {"axis": 1}))
    model = mb.build()
    graph = read_model(model).main
    assert "int64" in (registry.check(graph.ops[0], graph) or "")
    feeds = {x: np.arange(10, dtype=np.float32).reshape(2, 5), i: np.array([4, 2], np.int64)}
    assert_matches_litert(model, feeds, all_gpu=False)
