"""Which decomposition a dispatch runs with, before any tuning: fill the target, then keep tiles large.

A kernel lists its decompositions (kernels/tiling.py); each launches some number of invocations. The choice:
the candidate with the fewest invocations that still reaches the target's fill (so tiles stay as large, and
splits as shallow, as the device allows); when none reaches it, the one with the most. Ties go to larger tiles
(more reuse per load), then shallower splits. Subgroup reductions replace workgroup-memory ones when the
device has the `subgroup` feature. A tuned choice from the cache (tools/tune.py) overrides all this.
"""

from __future__ import annotations

from ..kernels.base import Decomposition, Variants
from .target import Target


def usable(variants: Variants, target: Target) -> list[Decomposition]:
    """The candidates this device can run, with one reduction mode per split: subgroups where available."""
    return [d for d in variants.candidates if d.split == 1 or d.subgroup == target.subgroups]


def choose(variants: Variants, target: Target) -> Decomposition:
    options = usable(variants, target) or variants.candidates
    lanes = {d: variants.invocations(d) for d in options}

    def area(d: Decomposition) -> int:
        return d.tile[0] * d.tile[1]

    reaching = [d for d in options if lanes[d] >= target.fill]
    if reaching:
        return min(reaching, key=lambda d: (lanes[d], -area(d), d.split))
    return max(options, key=lambda d: (lanes[d], area(d), -d.split))
