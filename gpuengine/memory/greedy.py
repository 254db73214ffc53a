"""Greedy shared-object assignment (Lee et al. 2019, Algorithm 1).

Walk the steps in execution order.  At step ``t`` every object whose tensor was last read before ``t``
goes back to the pool; then every tensor produced at ``t`` takes the free object "that has the closest size
by absolute difference" (the paper's words), grown to fit when it is smaller: of the smallest object large
enough and the largest one too small, the nearer (the large enough one on a tie: nothing to grow), as TFLite's
GreedyInOrderAssignment does.  An empty pool means a new object.  Objects are kept in a sorted pool and releases
in a heap, so the whole walk is O(n log n).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable

from .plan import MemoryPlan
from .records import UsageRecord, check_records

try:  # sortedcontainers ships with hypothesis; the list fallback is O(n) per insert but same result.
    from sortedcontainers import SortedList as _SortedList
except ImportError:  # pragma: no cover - exercised only without sortedcontainers
    _SortedList = None

__all__ = ["greedy_walk", "plan_greedy"]


class _Pool:
    """Free objects ordered by ``(size, object id)``."""

    def __init__(self) -> None:
        self._items = _SortedList() if _SortedList is not None else []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, size: int, obj: int) -> None:
        if _SortedList is not None:
            self._items.add((size, obj))
        else:
            bisect.insort(self._items, (size, obj))

    def take_closest(self, size: int) -> int:
        """Remove and return the object nearest ``size`` bytes by absolute difference (of the smallest one large
        enough and the largest one too small; the large enough one on a tie)."""
        i = bisect.bisect_left(self._items, (size, -1))
        if i == len(self._items) or (i > 0 and size - self._items[i - 1][0] < self._items[i][0] - size):
            i -= 1
        return self._items.pop(i)[1]


def plan_greedy(records: Iterable[UsageRecord]) -> MemoryPlan:
    """Assign tensors to shared objects with the paper's greedy algorithm.

    Tensors produced at the same step are served largest first, so the big one gets the best-fitting
    free object instead of a small one grabbing it (the paper leaves this order open).
    """
    recs = sorted(check_records(records), key=lambda r: (r.first, -r.size, r.tensor))
    return greedy_walk(recs, "greedy")


def greedy_walk(recs: list[UsageRecord], strategy: str) -> MemoryPlan:
    """The walk itself over ``recs`` in the order given (non-decreasing first step): each tensor takes the free
    object closest in size, grown to fit, or a new one.  TFLite's GreedyInOrderAssignment is this walk over the
    records in their creation order (memory/tflite.py)."""
    sizes: list[int] = []
    placement: dict[int, tuple[int, int]] = {}
    pool = _Pool()
    in_use: list[tuple[int, int]] = []  # heap of (last step of the object's current tensor, object)
    for r in recs:
        while in_use and in_use[0][0] < r.first:
            _, obj = heapq.heappop(in_use)
            pool.add(sizes[obj], obj)
        if len(pool):
            obj = pool.take_closest(r.size)
            sizes[obj] = max(sizes[obj], r.size)
        else:
            obj = len(sizes)
            sizes.append(r.size)
        placement[r.tensor] = (obj, 0)
        heapq.heappush(in_use, (r.last, obj))
    return MemoryPlan(strategy=strategy, object_sizes=sizes, placement=placement)
