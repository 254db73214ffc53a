"""Exact offsets planning: an integer program over the arena offsets, solved by HiGHS (scipy.optimize.milp) within
a time budget, seeded by the greedy-by-size heuristic and falling back to it.

The problem (dynamic storage allocation) is NP-hard; the heuristic is usually at the lower bound, and then nothing
is solved. Otherwise, with A the alignment, s_i the (4-byte rounded) size of tensor i and c_i = ceil(s_i / A):

    minimize P
    subject to  A k_i + s_i <= P                                   for every tensor i
                k_i + c_i <= k_j + U (1 - z_ij)                    for every pair (i, j) live at a common step:
                k_j + c_j <= k_i + U z_ij                          z_ij = 1: i below j, 0: j below i
                k_i integer in [0, (H - s_i) / A],  z_ij binary,  P in [L, H]

k_i is tensor i's offset in units of A (A k_i + s_i <= A k_j is k_j - k_i >= c_i for integers), H the heuristic's
arena (no worse plan is wanted), U = H / A + max c (big enough to switch a pair off) and L the aligned lower bound:
at every step the tensors live there stack up, each taking A c_i bytes but the topmost only s_i, so no plan is
smaller than the largest such sum. A solution at L, or HiGHS's own proof, makes the plan `optimal`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .. import settings
from .offsets import DEFAULT_ALIGNMENT, plan_greedy_by_size
from .plan import MemoryPlan
from .records import UsageRecord, check_records

__all__ = ["DEFAULT_TIME_BUDGET", "aligned_lower_bound", "plan_offsets"]

DEFAULT_TIME_BUDGET = float(settings.get(settings.MEMPLAN_BUDGET, "5.0"))  # seconds per plan, a safety net
_GRANULE = 4
MAX_PAIRS = 40_000  # beyond this many overlapping pairs the program is not built: the heuristic stands
# Branch-and-bound nodes: a budget that, unlike time, gives the same plan on every run and machine (the time budget
# is only a safety net).
NODE_LIMIT = int(settings.get(settings.MEMPLAN_NODES, "1000"))


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def aligned_lower_bound(records: Iterable[UsageRecord], alignment: int = DEFAULT_ALIGNMENT) -> int:
    """No arena with `alignment`-aligned offsets holding the records is smaller (see the module docstring)."""
    delta: dict[int, list[tuple[int, int]]] = {}
    for r in records:
        size = _round_up(r.size, _GRANULE)
        if size:
            delta.setdefault(r.first, []).append((1, r.tensor))
            delta.setdefault(r.last + 1, []).append((-1, r.tensor))
    sizes = {r.tensor: _round_up(r.size, _GRANULE) for r in records}
    live: set[int] = set()
    best = 0
    for step in sorted(delta):
        for sign, t in delta[step]:
            (live.add if sign > 0 else live.discard)(t)
        if live:
            padded = [_round_up(sizes[t], alignment) for t in live]
            slack = max(p - sizes[t] for p, t in zip(padded, live))
            best = max(best, sum(padded) - slack)
    return best


def plan_offsets(records: Iterable[UsageRecord], alignment: int = DEFAULT_ALIGNMENT,
                 time_budget: float | None = None, min_saving: int = 0) -> MemoryPlan:
    """The smallest arena plan HiGHS finds within NODE_LIMIT branch-and-bound nodes (GPUENGINE_MEMPLAN_NODES, 1000)
    and `time_budget` seconds (GPUENGINE_MEMPLAN_BUDGET, 5 s), never worse than greedy_by_size's; `optimal` when
    proven. Without SciPy the heuristic's plan is returned, and so it is when the most the solver could save (the
    heuristic's arena minus the lower bound) is under `min_saving` bytes."""
    recs = check_records(records)
    seed = plan_greedy_by_size(recs, alignment=alignment)
    plan = MemoryPlan(strategy="offsets", object_sizes=seed.object_sizes, placement=seed.placement)
    bound = aligned_lower_bound(recs, alignment)
    if not recs or plan.total_bytes <= bound:
        plan.optimal = True
        return plan
    budget = DEFAULT_TIME_BUDGET if time_budget is None else time_budget
    if budget <= 0 or plan.total_bytes - bound < min_saving:
        return plan
    try:
        solved = _solve(recs, alignment, plan.total_bytes, bound, budget)
    except ImportError:
        return plan
    if solved is None:
        return plan
    placement, arena, proven = solved
    if arena < plan.total_bytes or proven:
        candidate = MemoryPlan(strategy="offsets", object_sizes=[arena], placement=placement,
                               optimal=proven or arena <= bound)
        try:
            candidate.validate(recs)
        except (AssertionError, ValueError):  # numerical trouble in the solver: the heuristic stands
            return plan
        if arena < plan.total_bytes:
            return candidate
        plan.optimal = candidate.optimal  # the solver proved the heuristic's arena optimal
    return plan


def _solve(recs: list[UsageRecord], alignment: int, heuristic: int, bound: int,
           budget: float) -> tuple[dict[int, tuple[int, int]], int, bool] | None:
    """(placement, arena bytes, proven optimal) from HiGHS, or None when it found nothing usable in time."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    active = [r for r in recs if _round_up(r.size, _GRANULE) > 0]
    n = len(active)
    sizes = np.array([_round_up(r.size, _GRANULE) for r in active], np.float64)
    units = np.ceil(sizes / alignment)
    order = sorted(range(n), key=lambda i: active[i].first)
    pairs: list[tuple[int, int]] = []
    for a, i in enumerate(order):  # sweep by start: j overlaps i when it starts before i ends
        for j in order[a + 1:]:
            if active[j].first > active[i].last:
                break
            pairs.append((i, j))
    if len(pairs) > MAX_PAIRS:
        return None
    m = len(pairs)
    top = heuristic // alignment + int(units.max()) + 1  # U: switches a pair's constraint off
    # variables: k_0..k_{n-1}, P, z_0..z_{m-1}
    p_col = n
    rows, cols, vals = [], [], []
    lower, upper = [], []
    row = 0
    for i in range(n):  # A k_i - P <= -s_i
        rows += [row, row]
        cols += [i, p_col]
        vals += [float(alignment), -1.0]
        lower.append(-np.inf)
        upper.append(-sizes[i])
        row += 1
    for q, (i, j) in enumerate(pairs):
        z = n + 1 + q
        # k_i - k_j + U z <= U - c_i      (z = 1: i below j)
        rows += [row, row, row]
        cols += [i, j, z]
        vals += [1.0, -1.0, float(top)]
        lower.append(-np.inf)
        upper.append(top - units[i])
        row += 1
        # k_j - k_i - U z <= -c_j          (z = 0: j below i)
        rows += [row, row, row]
        cols += [j, i, z]
        vals += [1.0, -1.0, -float(top)]
        lower.append(-np.inf)
        upper.append(-units[j])
        row += 1
    matrix = coo_matrix((vals, (rows, cols)), shape=(row, n + 1 + m)).tocsr()
    c = np.zeros(n + 1 + m)
    c[p_col] = 1.0
    k_high = np.floor((heuristic - sizes) / alignment)
    lb = np.concatenate([np.zeros(n), [float(bound)], np.zeros(m)])
    ub = np.concatenate([np.maximum(k_high, 0), [float(heuristic)], np.ones(m)])
    integrality = np.concatenate([np.ones(n), [0], np.ones(m)])
    result = milp(c, constraints=LinearConstraint(matrix, lower, upper), integrality=integrality,
                  bounds=Bounds(lb, ub), options={"time_limit": budget, "node_limit": NODE_LIMIT, "disp": False})
    if result.x is None:
        return None
    ks = np.round(result.x[:n]).astype(np.int64)
    offsets = {active[i].tensor: int(ks[i]) * alignment for i in range(n)}
    arena = int(max(int(ks[i]) * alignment + int(sizes[i]) for i in range(n)))
    placement = {r.tensor: (0, offsets.get(r.tensor, 0)) for r in recs}
    return placement, arena, bool(result.status == 0)
