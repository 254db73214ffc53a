"""Workgroup-size search for one kernel, independent of the GPU: it only calls `measure(workgroup) -> ns`.

Start from the default; sweep a coarse grid (the paper's 2/4/8 per axis, widened to 1..256 for desktop
GPUs, within the device limits and the kernel's grid); then coordinate descent (halve/double one axis at a
time) from the best so far; every point is the median of repeated measurements; stop at the budget.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Workgroup = tuple[int, int, int]
AXIS_VALUES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
COARSE_VALUES = (1, 2, 4, 8, 16, 64, 256)


@dataclass
class Limits:
    max_invocations: int = 256
    max_size: Workgroup = (256, 256, 64)


@dataclass
class SearchResult:
    best: Workgroup
    best_ns: float
    default: Workgroup
    default_ns: float
    evaluated: dict[Workgroup, float] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.default_ns / self.best_ns if self.best_ns > 0 else 1.0


def valid(wg: Workgroup, grid: tuple[int, int, int], limits: Limits) -> bool:
    if wg[0] * wg[1] * wg[2] > limits.max_invocations or any(w > m for w, m in zip(wg, limits.max_size)):
        return False
    # An axis may exceed the grid extent only up to the next power of two (no fully idle lanes beyond that).
    return all(w <= max(1, 1 << max(0, (g - 1).bit_length())) for w, g in zip(wg, grid))


def coarse_grid(grid: tuple[int, int, int], limits: Limits) -> list[Workgroup]:
    points = [wg for wg in itertools.product(COARSE_VALUES, repeat=3) if valid(wg, grid, limits)]
    # Favour points with enough invocations to fill a SIMD group first; all are tried within the budget.
    return sorted(points, key=lambda wg: (wg[0] * wg[1] * wg[2] < 32, -wg[0], -wg[1]))


def neighbours(wg: Workgroup, grid: tuple[int, int, int], limits: Limits) -> list[Workgroup]:
    out = []
    for axis in range(3):
        for factor in (2, 0.5):
            value = int(wg[axis] * factor)
            if value < 1:
                continue
            cand = tuple(value if a == axis else wg[a] for a in range(3))
            if valid(cand, grid, limits):  # type: ignore[arg-type]
                out.append(cand)
    return out  # type: ignore[return-value]


def tune_workgroup(measure: Callable[[Workgroup], float], default: Workgroup, grid: tuple[int, int, int],
                   limits: Limits, budget_s: float, repeats: int = 3,
                   clock: Callable[[], float] = time.monotonic) -> SearchResult:
    deadline = clock() + budget_s
    evaluated: dict[Workgroup, float] = {}

    def score(wg: Workgroup) -> float:
        if wg not in evaluated:
            evaluated[wg] = statistics.median(measure(wg) for _ in range(max(1, repeats)))
        return evaluated[wg]

    default_ns = score(default)
    best, best_ns = default, default_ns
    for wg in coarse_grid(grid, limits):
        if clock() >= deadline:
            break
        ns = score(wg)
        if ns < best_ns:
            best, best_ns = wg, ns
    improved = True
    while improved and clock() < deadline:
        improved = False
        for wg in neighbours(best, grid, limits):
            if clock() >= deadline:
                break
            ns = score(wg)
            if ns < best_ns:
                best, best_ns, improved = wg, ns, True
    if best != default and best_ns > default_ns * 0.97:  # within noise: keep the default
        best, best_ns = default, default_ns
    return SearchResult(best, best_ns, default, default_ns, evaluated)
