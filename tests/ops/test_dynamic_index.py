"""EMBEDDING_LOOKUP, GATHER_ND and DYNAMIC_UPDATE_SLICE with run-time int32 indices against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert

from gpuengine.model.builder import ModelBuilder


def lookup_model(vocab: int, width: tuple[int, ...], n: int, table_input: bool = False) -> tuple[bytes, int, int]:
    mb = ModelBuilder()
    ids = mb.input("ids", (n,), np.int32)
    rng = np.random.default_rng(vocab)
    table = mb.input("table", (vocab, *width)) if table_input else \
        mb.const("table", rng.standard_normal((vocab, *width)).astype(np.float32))
    mb.output(mb.op("EMBEDDING_LOOKUP", [ids, table], (n, *width)))
    return mb.build(), ids, table


@pytest.mark.parametrize("vocab,width,n,table_input", [(150, (128,), 1, False), (37, (6,), 9, False),
                                                       (11, (3, 5), 4, True)])
def test_embedding_lookup(vocab, width, n, table_input):
    model, ids, table = lookup_model(vocab, width, n, table_input)
    rng = np.random.default_rng(n)
    feeds = {ids: rng.integers(0, vocab, (n,)).astype(np.int32)}
    if table_input:
        feeds[table] = rng.standard_normal((vocab, *width)).astype(np.float32)
    feeds[ids][0] = vocab - 1
    assert_matches_litert(model, feeds)


@pytest.mark.parametrize("params_shape,indices_shape,const_params", [
    ((100, 2), (1, 1), True), ((100, 1, 1, 100), (7, 1), True), ((5, 6, 7), (2, 3, 2), False), ((4, 9), (3, 2), False),
])
def test_gather_nd(params_shape, indices_shape, const_params):
    mb = ModelBuilder()
    rng = np.random.default_rng(len(params_shape))
    values = rng.standard_normal(params_shape).astype(np.float32)
    params = mb.const("params", values) if const_params else mb.input("params", params_shape)
    indices = mb.input("indices", indices_shape, np.int32)
    k = indices_shape[-1]
    mb.output(mb.op("GATHER_ND", [params, indices], (*indices_shape[:-1], *params_shape[k:])))
    index = np.stack([rng.integers(0, d, indices_shape[:-1]) for d in params_shape[:k]], -1).astype(np.int32)
    feeds = {indices: index} if const_params else {params: values, indices: index}
    assert_matches_litert(mb.build(), feeds)


@pytest.mark.parametrize("start", [(0, 0, 0, 0), (0, 57, 0, 0), (0, 99, 0, 0), (0, 120, 0, 0), (0, -3, 1, 0)])
def test_dynamic_update_slice_kv_cache(start):
    """One position of a (1, 100, 4, 4) cache written at run-time offsets; offsets past the end are clamped so the
    update fits (LiteRT's rule)."""
    mb = ModelBuilder()
    cache, update = mb.input("cache", (1, 100, 4, 4)), mb.input("update", (1, 1, 4, 4))
    offsets = mb.input("offsets", (4,), np.int32)
    mb.output(mb.op("DYNAMIC_UPDATE_SLICE", [cache, update, offsets], (1, 100, 4, 4)))
    rng = np.random.default_rng(1)
    assert_matches_litert(mb.build(), {cache: rng.standard_normal((1, 100, 4, 4)).astype(np.float32),
                                       update: rng.standard_normal((1, 1, 4, 4)).astype(np.float32),
                                       offsets: np.array(start, np.int32)})


def test_dynamic_update_slice_prefill_rows():
    """Several rows written at once (prefill), into a rank-3 operand with odd channels."""
    mb = ModelBuilder()
    operand, update = mb.input("operand", (2, 20, 7)), mb.input("update", (1, 5, 7))
    offsets = mb.input("offsets", (3,), np.int32)
    mb.output(mb.op("DYNAMIC_UPDATE_SLICE", [operand, update, offsets], (2, 20, 7)))
    rng = np.random.default_rng(2)
    assert_matches_litert(mb.build(), {operand: rng.standard_normal((2, 20, 7)).astype(np.float32),
                                       update: rng.standard_normal((1, 5, 7)).astype(np.float32),
                                       offsets: np.array([1, 13, 0], np.int32)})
