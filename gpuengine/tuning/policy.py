"""Which decomposition a dispatch runs with, before any tuning: the one estimated fastest on the target.

A kernel lists its decompositions (kernels/tiling.py) with, for each, the invocations it launches and the work
of one invocation (kernels/tiling.py's cost units: loads, multiply-adds, the split's combining). A device of
the target's class runs about `fill` invocations at once (tuning/target.py), so a decomposition's time is
estimated as

    work per invocation x max(1, active invocations / fill)

Below the fill the device has idle lanes and time is one invocation's latency: deep reductions over few outputs
want small tiles and splits. Above it the device is full and time is the total work: large tiles (more reuse
per load) and no split (no combining) win, which is all a CPU adapter (fill 64) ever sees. Ties go to fewer
invocations. Subgroup reductions replace workgroup-memory ones when the device has the `subgroup` feature.
A tuned choice from the cache (tools/tune.py) overrides all this.
"""

from __future__ import annotations

from ..errors import UnsupportedOpError
from ..kernels.base import Decomposition, Variants
from .target import Target


def usable(variants: Variants, target: Target) -> list[Decomposition]:
    """The candidates this device can run, with one reduction mode per split: subgroups where available."""
    return [d for d in variants.candidates if d.split == 1 or d.subgroup == target.subgroups]


def estimated_time(variants: Variants, d: Decomposition, target: Target) -> float:
    """In cost units (kernels/tiling.py); only comparable between decompositions of one dispatch."""
    return variants.work(d) * max(1.0, variants.active(d) / target.fill)


def choose(variants: Variants, target: Target) -> Decomposition:
    if not variants.candidates:  # every kernel offers one within WebGPU's defaults (tests/test_no_dead_ends.py)
        raise UnsupportedOpError(f"gpuengine bug: the kernel offers no decomposition of {variants.problem} "
                                 "within WebGPU's default limits; please report it with the model")
    options = usable(variants, target) or variants.candidates
    return min(options, key=lambda d: (estimated_time(variants, d, target), variants.invocations(d)))
