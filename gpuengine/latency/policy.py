"""Which decomposition a dispatch runs with, before any tuning: the one predicted fastest on the target.

A kernel lists its decompositions (lowering/kernels/tiling.py) with, for each, the invocations it launches and the work
of one invocation (lowering/kernels/tiling.py's cost units). The latency model (latency/latency.py) predicts each one's
time on a device description: the adapter's fitted one (`gpuengine calibrate`) where there is one, else the
built-in description standing for the target's class (latency/devices.py: an H100 for discrete, an Iris Xe for
integrated, lavapipe for cpu). Below the device's concurrent lanes time is one invocation's latency: deep
reductions over few outputs want small tiles and splits. Above them the device is full and time is the total
work: large tiles (more reuse per load) and no split (no combining) win, which is all a CPU adapter ever sees.
Ties go to fewer invocations. Subgroup reductions replace workgroup-memory ones when the device has the
`subgroup` feature. A tuned choice from the cache (tools/tune.py) overrides all this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedOpError
from . import devices, latency
from .target import Target

if TYPE_CHECKING:  # annotations only: a kernel's offer is read through its attributes
    from ..lowering.kernels.base import Decomposition, Variants


def usable(variants: Variants, target: Target) -> list[Decomposition]:
    """The candidates this device can run, with one reduction mode per split: subgroups where available."""
    return [d for d in variants.candidates if d.split == 1 or d.subgroup == target.subgroups]


def estimated_time(variants: Variants, d: Decomposition, target: Target,
                   device: latency.Device | None = None) -> float:
    """Predicted nanoseconds of the dispatch in decomposition d, without its bytes (the same for every
    decomposition of a dispatch): only comparable between decompositions of one dispatch."""
    return latency.predict_ns(latency.candidate_cost(variants, d), device or devices.for_target(target))


def ranked(variants: Variants, target: Target, device: latency.Device | None = None) -> list[Decomposition]:
    """The usable candidates, predicted fastest first (ties: fewer invocations)."""
    if not variants.candidates:  # every kernel offers one within WebGPU's defaults (tests/test_no_dead_ends.py)
        raise UnsupportedOpError(f"gpuengine bug: the kernel offers no decomposition of {variants.problem} "
                                 "within WebGPU's default limits; please report it with the model")
    options = usable(variants, target) or variants.candidates
    return [d for _, d in latency.rank(variants, options, device or devices.for_target(target))]


def choose(variants: Variants, target: Target, device: latency.Device | None = None) -> Decomposition:
    return ranked(variants, target, device)[0]
