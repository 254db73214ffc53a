"""One entry point, ``plan_memory``, over all planning strategies."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .greedy import plan_greedy
from .mincostflow import plan_mincostflow
from .naive import plan_naive
from .offsets import DEFAULT_ALIGNMENT, plan_greedy_by_size
from .plan import MemoryPlan
from .records import UsageRecord, check_records

__all__ = ["STRATEGIES", "plan_memory"]

STRATEGIES: tuple[str, ...] = ("naive", "greedy", "mincostflow", "greedy_by_size", "best")

_SHARED: dict[str, Callable[[list[UsageRecord]], MemoryPlan]] = {
    "naive": plan_naive,
    "greedy": plan_greedy,
    "mincostflow": plan_mincostflow,
}


def plan_memory(
    records: Iterable[UsageRecord], strategy: str = "best", alignment: int = DEFAULT_ALIGNMENT
) -> MemoryPlan:
    """Plan storage for the intermediate tensors described by ``records``.

    ``alignment`` only matters for ``greedy_by_size`` (offsets into one arena); shared-object plans put
    every tensor at offset 0.  ``best`` runs greedy and mincostflow and keeps the smaller plan (greedy on a
    tie, as it is cheaper to recompute); its ``strategy`` reads e.g. ``"best(mincostflow)"``, and
    ``plan.requested_strategy`` / ``plan.chosen_strategy`` split that back.  SciPy is optional: without
    it ``best`` falls back to greedy alone, while asking for ``mincostflow`` raises ``ImportError``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown memory strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    recs = check_records(records)
    if strategy == "greedy_by_size":
        return plan_greedy_by_size(recs, alignment=alignment)
    if strategy == "best":
        candidates = [plan_greedy(recs)]
        try:
            candidates.append(plan_mincostflow(recs))
        except ImportError:
            pass
        winner = min(candidates, key=lambda p: p.total_bytes)  # min keeps the first (greedy) on ties
        return MemoryPlan(
            strategy=f"best({winner.strategy})",
            object_sizes=winner.object_sizes,
            placement=winner.placement,
        )
    return _SHARED[strategy](recs)
