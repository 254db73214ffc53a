"""Lower bound on the memory any plan needs, to judge how far a strategy is from optimal."""

from __future__ import annotations

from collections.abc import Iterable

from .records import UsageRecord

__all__ = ["lower_bound"]


def lower_bound(records: Iterable[UsageRecord]) -> int:
    """Maximum over steps of the total size of the tensors live at that step.

    Tensors live at the same step need disjoint bytes under every strategy, so no plan can be smaller.
    """
    delta: dict[int, int] = {}
    for r in records:
        delta[r.first] = delta.get(r.first, 0) + r.size
        delta[r.last + 1] = delta.get(r.last + 1, 0) - r.size
    best = live = 0
    for step in sorted(delta):
        live += delta[step]
        best = max(best, live)
    return best
