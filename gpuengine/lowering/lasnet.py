"""LASNet-style masked blocks run spatially sparse inside a GPU program (planning.sparse_partitions chose them):
the block's ops are left out of the dense lowering and its two dispatches (lowering/kernels/lasnet.py: the mask
kernel, then the block kernel dispatched indirectly over the active patches) take their place in the program's one
command buffer, reading x and writing out where the memory plan puts them (PHWC4). The active-patch count goes from
the mask kernel to the indirect dispatch on the GPU: no host round trip, no second submit."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UnsupportedOpError
from ..latency.sparse import expected_active
from ..passes.lasnet_blocks import MaskedBlock
from .kernels import lasnet
from .kernels.base import KernelSpec

__all__ = ["SparseBlock", "block_ops", "insert_blocks"]


# a block, its execution patch, the activation rate expected and its block kernel's decomposition (lasnet.PIXELS)
SparseBlock = tuple[MaskedBlock, int, float, int]


def block_ops(sparse: list[SparseBlock]) -> set[int]:
    """The ops the sparse blocks' dispatches stand for (left out of the dense lowering)."""
    return {i for block, *_ in sparse for i in block.ops}


def insert_blocks(specs: list[KernelSpec], sparse: list[SparseBlock],
                  root: Callable[[int], int]) -> list[KernelSpec]:
    """`specs` (the dense lowering of the other ops, in order) with each block's two dispatches inserted after the
    dispatch writing its x and before the first reading its out (priced at the active patches the rate implies)."""
    out = list(specs)
    for block, patch, rate, pixels in sparse:
        x, y = root(block.x), root(block.out)
        writes_x = [k for k, s in enumerate(out) if any(b.writable and b.tensor is not None and root(b.tensor) == x
                                                        for b in s.bindings)]
        reads_y = [k for k, s in enumerate(out) if any(not b.writable and b.tensor is not None
                                                       and root(b.tensor) == y for b in s.bindings)]
        at = min(reads_y, default=len(out))
        if writes_x and writes_x[-1] >= at:
            raise UnsupportedOpError(f"LASNet block at op {min(block.ops)}: its output is read before its input is "
                                     "written")
        h, w, _ = block.shape
        out[at:at] = lasnet.specs(block, patch, "mask", "phwc4", key=f"lasnet{block.out}",
                                  active=expected_active(h, w, block.cell, patch, rate), pixels=pixels)
    return out
