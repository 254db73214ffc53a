"""Naive plan: one object per tensor; the baseline every other strategy must beat."""

from __future__ import annotations

from collections.abc import Iterable

from .plan import MemoryPlan
from .records import UsageRecord, check_records

__all__ = ["plan_naive"]


def plan_naive(records: Iterable[UsageRecord]) -> MemoryPlan:
    """Give each tensor its own object (useful for debugging: every intermediate stays readable)."""
    recs = check_records(records)
    return MemoryPlan(
        strategy="naive",
        object_sizes=[r.size for r in recs],
        placement={r.tensor: (i, 0) for i, r in enumerate(recs)},
    )
