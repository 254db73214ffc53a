"""Decompositions a kernel offers: output tiles per invocation, reduction splits, tiles per workgroup.

A kernel that takes a Decomposition (conv, depthwise, fully connected, batch matmul, reductions, softmax) maps
a 1-D tile index to its outputs (codegen.lane_placeholders) and lists what it can do here; latency/policy.py
chooses per target and shape, `gpuengine tune` per adapter. Every candidate is valid within WebGPU's default
limits (256 invocations and 16 KiB of workgroup memory per workgroup), so it runs on any adapter, and every kernel
offers at least one at every size (split 1 needs no workgroup memory): tests/test_no_dead_ends.py renders each
kernel's candidates over its sizes and checks both.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable

from .. import codegen
from .base import Code, Decomposition, KernelSpec, Variants

WORKGROUP = 64  # default invocations per workgroup: two 32-wide subgroups, one 64-wide wavefront
MAX_WORKGROUP = 256  # WebGPU's default maxComputeInvocationsPerWorkgroup
LANE_MEMORY_VEC4 = 1024  # 16 KiB of vec4<f32>: WebGPU's default maxComputeWorkgroupStorageSize
MIN_STEPS = 2  # a split leaves each invocation at least this many steps of the reduction
# Cost units for the policy's estimate (latency/policy.py), in scalar multiply-adds of one invocation: a vec4 read
# from memory costs several, combining a split costs shuffles (subgroups) or workgroup-memory round trips and
# barriers, and every invocation pays some index arithmetic and its stores. Rough on purpose: they only rank
# decompositions of one dispatch against each other, and `gpuengine tune` measures the real thing.
LOAD = 8.0
SHUFFLE = 8.0  # per vec4 and level of a subgroup butterfly
SHARED_LEVEL = 30.0  # per level of a workgroup-memory tree: barrier and bookkeeping, plus 2 loads per vec4
OVERHEAD = 40.0


# a workgroup variable: an array of scalars or vectors (its element type and length), or one scalar or vector
WORKGROUP_VARIABLE = re.compile(r"var<workgroup>\s+\w+\s*:\s*(?:array<\s*)?"
                               r"(vec([234])<(?:f32|u32|i32)>|vec([234])<f16>|f32|f16|u32|i32)\s*(?:,\s*(\d+)u?\s*>|;)")


def workgroup_memory_bytes(source: str) -> int:
    """Bytes of workgroup memory a WGSL module declares (scalars, vectors and arrays of them, the only kinds kernels
    use); checked against LANE_MEMORY_VEC4 * 16 by tests over every kernel's candidates."""
    total = 0
    for m in WORKGROUP_VARIABLE.finditer(source):
        lanes = int(m.group(2) or m.group(3) or 1)
        lanes = 4 if lanes == 3 else lanes  # vec3 is aligned like vec4
        scalar = 2 if m.group(1).endswith("f16>") or m.group(1) == "f16" else 4
        total += lanes * scalar * int(m.group(4) or 1)
    return total


def default_group(split: int, tiles: int | None = None) -> int:
    """Tiles per workgroup for a WORKGROUP-invocation workgroup (fewer when there are fewer tiles)."""
    group = max(1, WORKGROUP // split)
    if tiles is not None:
        cover = 1
        while cover < tiles and cover < group:
            cover *= 2
        group = cover
    return group


def lane_memory_fits(d: Decomposition, accumulators: int) -> bool:
    """Whether the split's workgroup array (codegen.lane_placeholders) stays within the default limit."""
    if d.split == 1:
        return True
    per = d.invocations_per_workgroup // (4 if d.subgroup else 1)
    return per * accumulators <= LANE_MEMORY_VEC4


def decompositions(tiles: Iterable[tuple[int, int]], reduction: int, count: Callable[[tuple[int, int]], int],
                   accumulators: Callable[[tuple[int, int]], int] | None = None,
                   max_split: int = MAX_WORKGROUP) -> list[Decomposition]:
    """Every tile shape x split (powers of two up to reduction / MIN_STEPS) x reduction mode, most work per
    invocation first. count(tile): how many tiles cover the output; accumulators(tile): vec4s an invocation
    reduces at the end (default: the tile's area)."""
    result = []
    for tile in tiles:
        n = count(tile)
        acc = accumulators(tile) if accumulators else tile[0] * tile[1]
        split = 1
        while split <= max_split and (split == 1 or split * MIN_STEPS <= reduction):
            for subgroup in ((False,) if split == 1 else (False, True)):
                d = Decomposition(tile, split, default_group(split, n), subgroup)
                if lane_memory_fits(d, acc):
                    result.append(d)
            split *= 2
    return sorted(result, key=lambda d: (d.split, -d.tile[0] * d.tile[1], d.subgroup))


def reduction_cost(d: Decomposition, accumulators: int) -> float:
    """Combining `accumulators` vec4s over a split of d.split invocations."""
    if d.split == 1:
        return 0.0
    levels = math.log2(d.split)
    if d.subgroup:
        return levels * accumulators * SHUFFLE
    return (levels + 2) * (SHARED_LEVEL + 2 * LOAD * accumulators)


def mat_step(tile: tuple[int, int]) -> float:
    """One step of a tiled mat4x4 reduction: tile[0] input vec4s, tile[1] weight blocks, their products."""
    return tile[0] * LOAD + tile[1] * 4 * LOAD + tile[0] * tile[1] * 16


def variants(family: str, numbers: dict[str, object], tiles: list[tuple[int, int]], reduction: int,
             count: Callable[[tuple[int, int]], int], step_cost: Callable[[tuple[int, int]], float],
             make: Callable[[Decomposition], KernelSpec], macs: int, code: Iterable[str] = (),
             repeats: int = 1) -> Variants:
    """The Variants of a dispatch whose tiles of the given shapes each reduce over `reduction` steps (done
    `repeats` times, e.g. once per kernel tap) costing step_cost(tile) each; count(tile): tiles in all."""

    def work(d: Decomposition) -> float:
        steps = repeats * math.ceil(reduction / d.split)
        return steps * step_cost(d.tile) + reduction_cost(d, d.tile[0] * d.tile[1]) + OVERHEAD

    return Variants(problem=problem_key(family, numbers, code),
                    candidates=decompositions(tiles, reduction, count),
                    invocations=lambda d: launched(count(d.tile), d), active=lambda d: count(d.tile) * d.split,
                    work=work, make=make, macs=macs)


def launched(tiles: int, d: Decomposition) -> int:
    """Invocations a dispatch of `tiles` tiles launches under d (whole workgroups)."""
    (x, y, z), _ = codegen.tile_dispatch(tiles, d)
    return x * y * z * d.invocations_per_workgroup


def problem_key(family: str, numbers: dict[str, object], code: Iterable[str] = ()) -> str:
    """The tuning-cache key of a decomposable dispatch: its template family, the numbers it bakes and a digest
    of generated code (prologue readers) that changes its cost."""
    text = ",".join(f"{k}={v}" for k, v in sorted(numbers.items()))
    digest = hashlib.sha1("\n".join(code).encode()).hexdigest()[:10]
    return f"{family}|{text}|{digest}"


def split_params(d: Decomposition, tiles: int, accumulators: list[str], combine: str = "{a} + {b}",
                 ) -> tuple[dict[str, int | Code], tuple[int, int, int]]:
    """The placeholders every decomposed template shares (lanes, the reduction of `accumulators`, SPLIT and
    TILES) and the dispatch's workgroup counts."""
    dispatch, nx = codegen.tile_dispatch(tiles, d)
    params: dict[str, int | Code] = {**codegen.lane_placeholders(d, len(accumulators), nx),
                                     "REDUCE": codegen.lane_reduce(accumulators, d, combine),
                                     "SPLIT": d.split, "TILES": tiles}
    return params, dispatch
