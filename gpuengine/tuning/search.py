"""Search for the fastest choice of one kernel, independent of the GPU: it only calls `measure(choice) -> ns`.

Two kinds of choice: a decomposition (tile, split, tiles per workgroup, reduction mode) for kernels that offer
several (lowering/kernels/tiling.py), and a workgroup size for the others. Both searches start from the default, try
the candidates nearest to it first, then descend coordinate-wise through neighbours of the best so far; every
point is the median of repeated measurements; they stop at the budget and keep the default unless another
choice is clearly (3 %) faster.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..lowering import codegen
from ..lowering.kernels.base import Decomposition, Variants
from ..lowering.kernels.tiling import LANE_MEMORY_VEC4, MAX_WORKGROUP, lane_memory_fits, workgroup_memory_bytes

Choice = TypeVar("Choice", bound=Hashable)
Workgroup = tuple[int, int, int]
AXIS_VALUES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
COARSE_VALUES = (1, 2, 4, 8, 16, 64, 256)
MARGIN = 0.97  # a choice must beat the default by 3 % to replace it (measurement noise)


@dataclass
class Limits:
    max_invocations: int = 256
    max_size: Workgroup = (256, 256, 64)


@dataclass
class SearchResult(Generic[Choice]):
    best: Choice
    best_ns: float
    default: Choice
    default_ns: float
    evaluated: dict[Choice, float] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.default_ns / self.best_ns if self.best_ns > 0 else 1.0


def search(measure: Callable[[Choice], float], default: Choice, candidates: list[Choice],
           neighbours: Callable[[Choice], list[Choice]], budget_s: float, repeats: int = 3,
           clock: Callable[[], float] = time.monotonic) -> SearchResult[Choice]:
    """Default, then `candidates` in order, then coordinate descent from the best; within the budget. A choice
    whose measurement raises (the device cannot run it) is skipped."""
    deadline = clock() + budget_s
    evaluated: dict[Choice, float] = {}

    def score(choice: Choice) -> float:
        if choice not in evaluated:
            try:
                evaluated[choice] = statistics.median(measure(choice) for _ in range(max(1, repeats)))
            except Exception:  # noqa: BLE001 - e.g. a workgroup over this device's limits: not a candidate
                evaluated[choice] = math.inf
        return evaluated[choice]

    default_ns = score(default)
    best, best_ns = default, default_ns
    for choice in candidates:
        if clock() >= deadline:
            break
        ns = score(choice)
        if ns < best_ns:
            best, best_ns = choice, ns
    improved = True
    while improved and clock() < deadline:
        improved = False
        for choice in neighbours(best):
            if clock() >= deadline:
                break
            ns = score(choice)
            if ns < best_ns:
                best, best_ns, improved = choice, ns, True
    if best != default and best_ns > default_ns * MARGIN:  # within noise: keep the default
        best, best_ns = default, default_ns
    return SearchResult(best, best_ns, default, default_ns, evaluated)


# -- workgroup sizes ------------------------------------------------------------------------------------------
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
                   clock: Callable[[], float] = time.monotonic) -> SearchResult[Workgroup]:
    return search(measure, default, coarse_grid(grid, limits), lambda wg: neighbours(wg, grid, limits), budget_s,
                  repeats, clock)


# -- decompositions -------------------------------------------------------------------------------------------
def decomposition_space(variants: Variants, default: Decomposition, subgroups: bool,
                        max_invocations: int = MAX_WORKGROUP) -> tuple[list[Decomposition],
                                                                       Callable[[Decomposition], list[Decomposition]]]:
    """The candidates a kernel offers on this device, nearest to the default first (in invocations launched),
    and the neighbours of a choice: tiles per workgroup halved or doubled, split halved or doubled."""
    offered = [d for d in variants.candidates if d.split == 1 or d.subgroup == subgroups]
    keys = {(d.tile, d.split, d.subgroup) for d in offered}
    lanes = max(1, variants.invocations(default))
    ordered = sorted(offered, key=lambda d: abs(math.log2(max(1, variants.invocations(d)) / lanes)))

    def fits(d: Decomposition) -> bool:
        if d in variants.candidates:  # the kernel's own: within the default limits (tests/test_no_dead_ends.py)
            return d.invocations_per_workgroup <= max_invocations
        # a neighbour: its workgroup arrays (which some kernels size by more than the tile) must fit too
        if d.invocations_per_workgroup > max_invocations or not lane_memory_fits(
                d, d.tile[0] * d.tile[1] if d.split > 1 else 1):
            return False
        spec = variants.make(d)
        return spec is None or workgroup_memory_bytes(codegen.render(spec)) <= LANE_MEMORY_VEC4 * 16

    def around(d: Decomposition) -> list[Decomposition]:
        """d's neighbours, of d's form (a `wide` or `staged` choice stays one: its flags are kept)."""
        out = []
        for group in (d.group * 2, d.group // 2):
            cand = dataclasses.replace(d, group=group)
            if group >= 1 and fits(cand):
                out.append(cand)
        for split in (d.split * 2, d.split // 2):
            mode = d.subgroup if split > 1 else False
            if (d.tile, split, mode) in keys:
                cand = dataclasses.replace(d, split=split, group=max(1, d.invocations_per_workgroup // split),
                                           subgroup=mode)
                if fits(cand):
                    out.append(cand)
        return out

    return [d for d in ordered if fits(d)], around
