"""The memory planners as pure functions: usage records in, a plan out. Every strategy on random schedules gives a
plan in which no two tensors live at a common step share a byte (checked here pair by pair, independently of
MemoryPlan.validate), never below the lower bound, and as large as its kind promises (naive: the sum; best: the
least of its candidates). No GPU adapter, no LiteRT."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuengine.memory import (
    DEFAULT_ALIGNMENT,
    STRATEGIES,
    MemoryPlan,
    UsageRecord,
    aligned_lower_bound,
    lower_bound,
    plan_greedy,
    plan_greedy_by_size,
    plan_memory,
    plan_naive,
    records_from_schedule,
)

SHARED_OBJECTS = ("naive", "greedy", "greedy_in_order", "greedy_by_breadth", "greedy_by_size_dist_priority",
                  "greedy_best", "mincostflow")  # every tensor at offset 0 of one of several objects
ARENAS = ("greedy_by_size", "offsets")  # every tensor at an aligned offset of one object


def random_records(seed: int, count: int = 12, steps: int = 10) -> list[UsageRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(count):
        first = int(rng.integers(0, steps))
        last = first + int(rng.integers(0, 4))
        out.append(UsageRecord(tensor=100 + t, size=int(rng.choice([4, 64, 300, 1024, 4096])), first=first,
                               last=last))
    return out


def clashes(plan: MemoryPlan, records: list[UsageRecord]) -> list[tuple[int, int]]:
    """Pairs of tensors live at a common step whose bytes overlap in the same object (brute force)."""
    out = []
    for a, b in itertools.combinations(records, 2):
        if a.last < b.first or b.last < a.first:
            continue
        (obj_a, off_a), (obj_b, off_b) = plan.placement[a.tensor], plan.placement[b.tensor]
        if obj_a == obj_b and off_a < off_b + b.size and off_b < off_a + a.size and a.size and b.size:
            out.append((a.tensor, b.tensor))
    return out


def fits(plan: MemoryPlan, records: list[UsageRecord]) -> bool:
    return all(plan.placement[r.tensor][1] + r.size <= plan.object_sizes[plan.placement[r.tensor][0]]
               for r in records)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_keeps_live_tensors_apart_and_stays_above_the_bound(strategy, seed):
    records = random_records(seed)
    plan = plan_memory(records, strategy)
    assert set(plan.placement) == {r.tensor for r in records}
    assert fits(plan, records) and not clashes(plan, records)
    assert plan.total_bytes >= lower_bound(records)
    if strategy in SHARED_OBJECTS:
        assert all(offset == 0 for _, offset in plan.placement.values())
    if strategy in ARENAS:
        assert plan.num_objects == 1 and all(off % DEFAULT_ALIGNMENT == 0 for _, off in plan.placement.values())
        assert plan.total_bytes >= aligned_lower_bound(records)


@pytest.mark.parametrize("seed", range(8))
def test_best_is_the_least_of_its_candidates_and_naive_the_sum(seed):
    records = random_records(seed)
    best = plan_memory(records, "best")
    assert best.requested_strategy == "best" and best.chosen_strategy in ("greedy", "mincostflow", "offsets")
    candidates = [plan_memory(records, s).total_bytes for s in ("greedy", "mincostflow", "offsets")]
    assert best.total_bytes == min(candidates)
    assert plan_naive(records).total_bytes == sum(r.size for r in records)


def test_a_chain_reuses_memory_down_to_the_bound():
    """op i reads tensor i - 1 and writes tensor i: only two tensors are ever live, so two objects suffice."""
    sizes = [1024, 2048, 1024, 2048, 1024, 2048]
    records = [UsageRecord(tensor=i, size=s, first=i, last=i + 1) for i, s in enumerate(sizes)]
    assert lower_bound(records) == 3072
    greedy = plan_greedy(records)
    assert greedy.num_objects == 2 and greedy.total_bytes == 3072
    arena = plan_greedy_by_size(records)
    assert arena.total_bytes == 3072 and not clashes(arena, records)


def test_tensors_never_live_together_share_one_object():
    records = [UsageRecord(tensor=t, size=512, first=t, last=t) for t in range(5)]
    plan = plan_greedy(records)
    assert plan.num_objects == 1 and plan.total_bytes == 512 == lower_bound(records)


def test_records_from_a_schedule_span_writer_to_last_reader():
    # op 0 writes 10, read by ops 1 and 3; op 1 writes 11, read by op 2; op 2 writes 12, read by nobody
    records = records_from_schedule({10: 40, 11: 80, 12: 16}, {10: 0, 11: 1, 12: 2}, {10: [1, 3], 11: [2]}, 4)
    assert [(r.tensor, r.first, r.last) for r in records] == [(10, 0, 3), (11, 1, 2), (12, 2, 2)]
    assert lower_bound(records) == 40 + 80 + 16  # all three are live at step 2
    with pytest.raises(ValueError, match="read by op 0"):
        records_from_schedule({10: 4}, {10: 1}, {10: [0]}, 2)


def test_the_validator_agrees_with_the_brute_force_check():
    records = [UsageRecord(tensor=1, size=64, first=0, last=2), UsageRecord(tensor=2, size=64, first=1, last=3)]
    overlapping = MemoryPlan("manual", [64], {1: (0, 0), 2: (0, 0)})
    assert clashes(overlapping, records) == [(1, 2)]
    with pytest.raises(AssertionError, match="live together"):
        overlapping.validate(records)
    apart = MemoryPlan("manual", [128], {1: (0, 0), 2: (0, 64)})
    assert not clashes(apart, records)
    apart.validate(records)
