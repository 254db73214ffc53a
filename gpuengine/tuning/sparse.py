"""The execution of a LASNet-style masked block chosen by measurement on the adapter (as `gpuengine tune` chooses
decompositions): per execution patch size S, the block's time with no patch active and with every patch active
(runtime/sparse_block.SparseBlockRunner modes "none" and "all"), linear in between; the engine's own dense
kernels for the block timed as they run in its program. The choice at an expected activation rate r: the fastest
S at the expected active patches (latency/sparse.expected_active), or dense when that is no faster.

This is the measured counterpart of latency/sparse.choose_execution, which prices the same kernels with the
latency model's device description and can be made without a GPU (`gpuengine predict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..latency.sparse import expected_active
from ..passes.lasnet_blocks import MaskedBlock
from ..runtime.sparse_block import SparseBlockRunner

__all__ = ["BlockTimes", "measure_block"]


@dataclass
class BlockTimes:
    """Measured milliseconds of one block on one adapter: dense (the engine's kernels), and per S the block with
    no patch and with every patch active."""

    block: MaskedBlock
    dense_ms: float
    none_ms: dict[int, float] = field(default_factory=dict)
    all_ms: dict[int, float] = field(default_factory=dict)

    def sparse_ms(self, patch: int, rate: float) -> float:
        """The block at S = `patch` when cells are active at `rate`: linear in the expected active patches."""
        h, w, _ = self.block.shape
        total = math.ceil(h / patch) * math.ceil(w / patch)
        share = expected_active(h, w, self.block.cell, patch, rate) / total
        return self.none_ms[patch] + share * (self.all_ms[patch] - self.none_ms[patch])

    def choose(self, rate: float) -> tuple[str, int, dict[str, float]]:
        """("sparse", S) or ("dense", 0), with every option's estimate in ms (a tie goes to dense)."""
        options = {f"sparse {p}": self.sparse_ms(p, rate) for p in self.none_ms}
        options["dense"] = self.dense_ms
        best = min(options, key=lambda k: (options[k], k != "dense"))
        return ("dense", 0, options) if best == "dense" else ("sparse", int(best.split()[1]), options)


def measure_block(gpu: Any, block: MaskedBlock, dense_ms: float, patches: tuple[int, ...] = (2, 4, 8, 16),
                  runs: int = 9) -> BlockTimes:
    """Time the block's sparse kernels at each S with no patch and with every patch active (the least of `runs`
    rounds each: what load disturbs least); `dense_ms`: the engine's dense kernels for the block, timed the same
    way by the caller."""
    times = BlockTimes(block, dense_ms)
    h, w, c = block.shape
    zeros = np.zeros((1, h, w, c), np.float32)  # the input does not matter: the mode decides what runs
    runners = {(patch, mode): SparseBlockRunner(gpu, block, patch, mode)
               for patch in patches for mode in ("none", "all")}
    for runner in runners.values():
        runner.run(zeros)
    for _ in range(max(1, runs)):  # rounds over every option, so a burst of load hits them all alike
        for (patch, mode), runner in runners.items():
            into = times.none_ms if mode == "none" else times.all_ms
            into[patch] = min(into.get(patch, math.inf), runner.time_ms(runs=1))
    return times
