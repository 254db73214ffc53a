"""SoD²'s peak-outward greedy (memory/peak_outward.py) against the exact arena planner (memory/exact.py): valid
plans, never under the bound, near the exact arena on random records, and a placement order decided at one size
reused at others (the records of a model at another input size: the same tensors and lifetimes, other bytes)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.memory.exact import aligned_lower_bound, plan_offsets
from gpuengine.memory.peak_outward import PlacementOrder, peak_outward_order, plan_peak_outward
from gpuengine.memory.records import UsageRecord


def _records(rng: np.random.Generator, n: int, scale: int = 1) -> list[UsageRecord]:
    out = []
    for t in range(n):
        first = int(rng.integers(0, n))
        out.append(UsageRecord(t, int(rng.integers(1, 64)) * 16 * scale, first, first + int(rng.integers(0, 4))))
    return out


def test_the_peak_is_placed_first() -> None:
    # step 2 holds the most bytes: tensors 1 and 2 live there go first, the larger at offset 0
    records = [UsageRecord(0, 100, 0, 0), UsageRecord(1, 300, 1, 2), UsageRecord(2, 400, 2, 3),
               UsageRecord(3, 50, 4, 5)]
    assert peak_outward_order(records)[:2] == [2, 1]
    plan = plan_peak_outward(records, alignment=4)
    plan.validate(records)
    assert plan.placement[2] == (0, 0) and plan.placement[1] == (0, 400)
    assert plan.total_bytes == 700 == aligned_lower_bound(records, 4)


@pytest.mark.parametrize("seed", range(8))
def test_near_the_exact_planner_on_random_records(seed: int) -> None:
    records = _records(np.random.default_rng(seed), 14)
    ours = plan_peak_outward(records, alignment=16)
    ours.validate(records)
    exact = plan_offsets(records, alignment=16, time_budget=5)
    assert exact.optimal
    bound = aligned_lower_bound(records, 16)
    assert bound <= exact.total_bytes <= ours.total_bytes <= 1.15 * exact.total_bytes  # measured: at most 1.134


def test_a_placement_order_serves_other_sizes() -> None:
    rng = np.random.default_rng(3)
    first = _records(rng, 12)
    order = PlacementOrder.of(first, alignment=16)
    for scale in (2, 3, 7):
        resized = [UsageRecord(r.tensor, r.size * scale + 16 * (r.tensor % 3), r.first, r.last) for r in first]
        plan = order.plan(resized)
        plan.validate(resized)
        assert plan.total_bytes >= aligned_lower_bound(resized, 16)
        assert plan.total_bytes <= 1.3 * plan_offsets(resized, alignment=16, time_budget=5).total_bytes
    with pytest.raises(ValueError, match="not those"):
        order.plan(first[1:])
