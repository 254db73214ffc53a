"""Expand a TFLite sparse tensor (CSR-style dim metadata, optional blocks) into a dense array."""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from .ir import Tensor

DENSE, SPARSE_CSR = 0, 1


def densify(t: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """Follows TFLite's FormatConverter: walk dims in traversal order, dense dims by size, sparse ones by
    their segments/indices; expanded dim k < rank is a block-count dim, rank + j the block dim of
    block_map[j]."""
    sp = t.sparsity
    if sp is None:
        return np.asarray(t.data).reshape(shape)
    rank = len(shape)
    dtype = t.dtype if t.dtype != np.uint8 or t.type_code == 3 else np.uint8
    values = np.asarray(t.data).view(dtype).reshape(-1)
    order = sp.traversal_order
    block_size = {d: 1 for d in range(rank)}
    for j, d in enumerate(sp.block_map):
        block_size[d] = sp.dim_metadata[order.index(rank + j)]["dense_size"]
    if len(order) != len(sp.dim_metadata) or sorted(order) != list(range(len(order))):
        raise ModelError(f"tensor {t.name!r}: inconsistent sparsity traversal order {order}")
    # Enumerate all stored coordinates level by level (vectorized per level).
    coords = np.zeros((1, len(order)), np.int64)
    parent = np.zeros(1, np.int64)
    for level, meta in enumerate(sp.dim_metadata):
        if meta["format"] == DENSE:
            n = meta["dense_size"]
            coords = np.repeat(coords, n, axis=0)
            idx = np.tile(np.arange(n), len(parent))
            parent = np.repeat(parent, n) * n + idx
        else:
            segs, inds = meta["array_segments"], meta["array_indices"]
            if parent.size and (parent.max() + 1 >= segs.size or segs[-1] > inds.size):
                raise ModelError(f"tensor {t.name!r}: sparse segments out of range at level {level}")
            counts = segs[parent + 1] - segs[parent]
            starts = np.repeat(segs[parent], counts)
            offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            positions = starts + offsets
            coords = np.repeat(coords, counts, axis=0)
            idx = inds[positions]
            parent = positions
        coords[:, level] = idx
    if coords.shape[0] != values.size:
        raise ModelError(f"tensor {t.name!r}: {values.size} stored values but {coords.shape[0]} "
                         "sparse positions")
    expanded = np.zeros((coords.shape[0], len(order)), np.int64)
    expanded[:, order] = coords
    dense_idx = []
    for d in range(rank):
        inner = 0
        if d in sp.block_map:
            inner = expanded[:, rank + sp.block_map.index(d)]
        dense_idx.append(expanded[:, d] * block_size[d] + inner)
    out = np.zeros(shape, values.dtype)
    out[tuple(dense_idx)] = values
    return out
