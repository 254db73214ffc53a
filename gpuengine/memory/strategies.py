"""One entry point, ``plan_memory``, over all planning strategies."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from .exact import plan_offsets
from .greedy import plan_greedy
from .mincostflow import plan_mincostflow
from .naive import plan_naive
from .offsets import DEFAULT_ALIGNMENT, plan_greedy_by_size
from .plan import MemoryPlan
from .records import UsageRecord, check_records
from .tflite import plan_greedy_best, plan_greedy_by_breadth, plan_greedy_by_size_dist_priority, plan_greedy_in_order

__all__ = ["STRATEGIES", "plan_memory"]

STRATEGIES: tuple[str, ...] = (
    "naive", "greedy", "greedy_in_order", "greedy_by_breadth", "greedy_by_size_dist_priority", "greedy_best",
    "mincostflow", "greedy_by_size", "offsets", "best",
)
# An arena above this is never chosen by ``best``: WebGPU's default maxBufferSize (256 MiB) could not hold it in
# one buffer, while shared objects split the same bytes over several.
MAX_ARENA_BYTES = 1 << 28

_SHARED: dict[str, Callable[[list[UsageRecord]], MemoryPlan]] = {
    "naive": plan_naive,
    "greedy": plan_greedy,
    "greedy_in_order": plan_greedy_in_order,
    "greedy_by_breadth": plan_greedy_by_breadth,
    "greedy_by_size_dist_priority": plan_greedy_by_size_dist_priority,
    "greedy_best": plan_greedy_best,
    "mincostflow": plan_mincostflow,
}


_MEMO: OrderedDict[tuple, MemoryPlan] = OrderedDict()
_MEMO_SIZE = 64
_MEMO_LOCK = threading.Lock()


def _scipy() -> bool:
    """Whether SciPy can be imported now: plans made with and without it differ, so the memo keys on it."""
    try:
        import scipy.optimize  # noqa: F401
        import scipy.sparse.csgraph  # noqa: F401
    except ImportError:
        return False
    return True


def _copy(plan: MemoryPlan) -> MemoryPlan:
    return MemoryPlan(strategy=plan.strategy, object_sizes=list(plan.object_sizes), placement=dict(plan.placement),
                      optimal=plan.optimal)


def plan_memory(
    records: Iterable[UsageRecord], strategy: str = "best", alignment: int = DEFAULT_ALIGNMENT,
    min_saving: int = 0,
) -> MemoryPlan:
    """``_plan_memory`` memoized by the records, strategy, alignment and min_saving: a shape planned before (a
    resize back to it, a second program of the same partition) is not planned again, which matters for the exact
    planner's time budget. The plan returned is the caller's own copy. min_saving: the exact planner (``offsets``,
    and ``best`` through it) runs only where it could save at least this many bytes over greedy_by_size (the
    runtime passes 1% of the program's weight bytes: a language model's few intermediates are not worth seconds
    of solving)."""
    recs = tuple(check_records(records))
    key = (recs, strategy, alignment, _scipy(), min_saving)
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
            return _copy(hit)
    plan = _plan_memory(list(recs), strategy, alignment, min_saving)
    with _MEMO_LOCK:
        _MEMO[key] = _copy(plan)
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return plan


def _plan_memory(
    records: Iterable[UsageRecord], strategy: str = "best", alignment: int = DEFAULT_ALIGNMENT, min_saving: int = 0,
) -> MemoryPlan:
    """Plan storage for the intermediate tensors described by ``records``.

    ``alignment`` only matters for ``greedy_by_size`` and ``offsets`` (offsets into one arena; ``offsets`` is
    the exact planner, memory/exact.py, seeded by greedy_by_size); shared-object plans put every tensor at
    offset 0.  ``best`` runs greedy, mincostflow and offsets and keeps the smallest plan (the earlier on a tie;
    an arena above MAX_ARENA_BYTES is not taken); its ``strategy`` reads e.g. ``"best(offsets)"``, and
    ``plan.requested_strategy`` / ``plan.chosen_strategy`` split that back.  SciPy is optional: without it
    ``best`` compares greedy with greedy_by_size's arena, ``offsets`` is greedy_by_size's plan, and asking
    for ``mincostflow`` raises ``ImportError``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown memory strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    recs = check_records(records)
    if strategy == "greedy_by_size":
        return plan_greedy_by_size(recs, alignment=alignment)
    if strategy == "offsets":
        return plan_offsets(recs, alignment=alignment, min_saving=min_saving)
    if strategy == "best":
        candidates = [plan_greedy(recs)]
        try:
            candidates.append(plan_mincostflow(recs))
        except ImportError:
            pass
        arena = plan_memory(recs, "offsets", alignment, min_saving)  # memoized: the "offsets" strategy's plan
        if arena.total_bytes <= MAX_ARENA_BYTES:
            candidates.append(arena)
        winner = min(candidates, key=lambda p: p.total_bytes)  # min keeps the first (greedy) on ties
        return MemoryPlan(
            strategy=f"best({winner.strategy})",
            object_sizes=winner.object_sizes,
            placement=winner.placement,
            optimal=winner.optimal,
        )
    return _SHARED[strategy](recs)
