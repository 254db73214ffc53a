"""Greedy-by-size offset assignment into one arena (TFLite's ``GreedyBySizeOffset`` idea).

One buffer holds every intermediate tensor at its own offset.  Tensors are placed largest first, because
big tensors are the hard ones to fit: each goes into the smallest gap, among the already placed tensors
whose lifetimes overlap its own, that is big enough, or else after the highest of them.  Tensors that are
never live together may overlap in bytes.  Offsets are aligned so each tensor can be bound as its own
storage-buffer range (WebGPU's ``minStorageBufferOffsetAlignment``, 256 on most devices).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from .plan import MemoryPlan
from .records import UsageRecord, check_records

__all__ = ["plan_greedy_by_size", "DEFAULT_ALIGNMENT"]

DEFAULT_ALIGNMENT = 256
_SIZE_GRANULE = 4  # WGSL storage arrays hold 4-byte scalars; binding sizes must be multiples of 4


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def plan_greedy_by_size(records: Iterable[UsageRecord], alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """Place every tensor at an ``alignment``-aligned offset of a single arena object.

    Sizes are rounded up to a multiple of 4 bytes first; the arena size is the highest end offset.
    """
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    recs = check_records(records)
    order = sorted(recs, key=lambda r: (-r.size, r.first, r.tensor))
    # Placed tensors sorted by offset: (offset, rounded size, first, last).
    placed: list[tuple[int, int, int, int]] = []
    placement: dict[int, tuple[int, int]] = {}
    arena = 0
    for r in order:
        size = _round_up(r.size, _SIZE_GRANULE)
        best_offset: int | None = None
        best_gap = 0
        prev_end = 0  # end of the highest overlapping tensor seen so far (walking up by offset)
        for off, other_size, first, last in placed:
            if last < r.first or r.last < first:
                continue  # never live together: free to share bytes
            start = _round_up(prev_end, alignment)
            gap = off - start
            if gap >= size and (best_offset is None or gap < best_gap):
                best_offset, best_gap = start, gap
            prev_end = max(prev_end, off + other_size)
        if best_offset is None:
            best_offset = _round_up(prev_end, alignment)
        placement[r.tensor] = (0, best_offset)
        bisect.insort(placed, (best_offset, size, r.first, r.last))
        arena = max(arena, best_offset + size)
    return MemoryPlan(strategy="greedy_by_size", object_sizes=[arena] if recs else [], placement=placement)
