"""SoD²'s peak-outward greedy offset planner, and its use at run time from a plan made once for many sizes.

Placement (one arena, offsets aligned): the tensors live at the step where the most bytes are live go first,
largest first, packed from offset 0; then the others by how far their lifetime is from that step (nearest first,
larger first on ties), each at the lowest aligned offset where it overlaps no placed tensor live at a common step.
The peak is where any plan needs the most room, so packing it first keeps the arena near the lower bound; the
tensors further out fit into the gaps the peak leaves.

`PlacementOrder` is the symbolic part (SoD²'s memory plan for dynamic shapes): the order is decided once, at one
size of a model's symbolic dimensions, and a later size is planned by placing its records in that order, one
first-fit pass without sorting or searching again (the records keep their tensors and lifetimes across sizes,
only the bytes change). The unit tests hold it against the exact planner (memory/exact.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .offsets import DEFAULT_ALIGNMENT
from .plan import MemoryPlan
from .records import UsageRecord, check_records

__all__ = ["PlacementOrder", "peak_outward_order", "plan_peak_outward"]

_SIZE_GRANULE = 4


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def peak_outward_order(records: Iterable[UsageRecord]) -> list[int]:
    """The tensors in placement order: live at the peak step (largest first), then by distance from it."""
    recs = check_records(records)
    if not recs:
        return []
    steps = max(r.last for r in recs) + 1
    live = [0] * steps
    for r in recs:
        for s in range(r.first, r.last + 1):
            live[s] += r.size
    peak = max(range(steps), key=lambda s: (live[s], -s))

    def distance(r: UsageRecord) -> int:
        return 0 if r.first <= peak <= r.last else min(abs(r.first - peak), abs(r.last - peak))

    return [r.tensor for r in sorted(recs, key=lambda r: (distance(r), -r.size, r.first, r.tensor))]


def _place(recs: list[UsageRecord], order: list[int], alignment: int) -> MemoryPlan:
    by_tensor = {r.tensor: r for r in recs}
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last), kept sorted by offset
    placement: dict[int, tuple[int, int]] = {}
    arena = 0
    for t in order:
        r = by_tensor[t]
        size = _round_up(r.size, _SIZE_GRANULE)
        offset = 0
        for off, other, first, last in placed:  # first fit: walk up past every overlapping tensor in the way
            if last < r.first or r.last < first:
                continue
            if off >= offset + size:
                break
            offset = max(offset, _round_up(off + other, alignment))
        placement[t] = (0, offset)
        placed.append((offset, size, r.first, r.last))
        placed.sort()
        arena = max(arena, offset + size)
    return MemoryPlan(strategy="peak_outward", object_sizes=[arena] if recs else [], placement=placement)


def plan_peak_outward(records: Iterable[UsageRecord], alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """SoD²'s peak-outward greedy arena plan."""
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    recs = check_records(records)
    return _place(recs, peak_outward_order(recs), alignment)


@dataclass
class PlacementOrder:
    """A placement order decided at one size, for the records of every size of the same plan."""

    order: list[int]
    alignment: int = DEFAULT_ALIGNMENT

    @staticmethod
    def of(records: Iterable[UsageRecord], alignment: int = DEFAULT_ALIGNMENT) -> PlacementOrder:
        return PlacementOrder(peak_outward_order(records), alignment)

    def plan(self, records: Iterable[UsageRecord]) -> MemoryPlan:
        """The arena plan of `records` (the same tensors and lifetimes, other sizes) placed in this order."""
        recs = check_records(records)
        if sorted(r.tensor for r in recs) != sorted(self.order):
            raise ValueError("the records are not those the placement order was made for")
        return _place(recs, self.order, self.alignment)
