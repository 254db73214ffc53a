"""The latency model's prediction for LASNet sparse execution of a masked residual block (lowering/kernels/lasnet.py,
runtime/sparse_block.py), and the choice it makes per block: the execution patch size S, or dense execution (every
patch) when the expected activation rate leaves too little to skip.

Each of the block's dispatches (the masker + compaction, the gather conv over active patches and their halo, the
scatter conv) becomes a DispatchCost priced by predict_ns, the same model and device description (built-in or fitted
by `gpuengine calibrate`) every other kernel is priced with; nothing here is fitted to the sparse kernels. The
active patches are an expectation: with cells active independently at rate r, a patch overlapping k cells runs
with probability 1 - (1 - r)^k, so a large S wastes work on inactive pixels and a small S recomputes more halo.
"""

from __future__ import annotations

import math

from .latency import Device, DispatchCost, memory_ns, predict_ns

__all__ = ["PATCHES", "choose_execution", "expected_active", "predict_block_ns"]

PATCHES = (2, 4, 8, 16)
_LOAD = 8.0  # cost units of one vec4 load (lowering/kernels/tiling.py LOAD)
_WORKGROUP = 64


def _row_tile(width: int, most: int = 4) -> int:
    """The kernels' row tile (lowering/kernels/lasnet.row_tile, which this layer cannot import)."""
    for tx in range(min(most, width), 1, -1):
        if width % tx == 0:
            return tx
    return min(most, width)


def _cells_per_patch(patch: int, cell: int) -> int:
    """Masker cells an aligned patch overlaps (1 when the patch is inside one cell)."""
    side = max(1, math.ceil(patch / cell))
    return side * side


def expected_active(h: int, w: int, cell: int, patch: int, rate: float) -> float:
    """Expected active patches when each cell is active with probability `rate`, independently."""
    patches = math.ceil(h / patch) * math.ceil(w / patch)
    return patches * (1.0 - (1.0 - min(max(rate, 0.0), 1.0)) ** _cells_per_patch(patch, cell))


def _costs(h: int, w: int, c: int, cell: int, patch: int, active: float) -> list[DispatchCost]:
    c4 = c // 4
    patches = math.ceil(h / patch) * math.ceil(w / patch)
    k = _cells_per_patch(patch, cell)
    mask = DispatchCost(invocations=math.ceil(patches / _WORKGROUP) * _WORKGROUP, active=patches,
                        workgroups=math.ceil(patches / _WORKGROUP), work=k * (cell * cell * c4 * _LOAD + c),
                        bytes_read=h * w * c * 4, bytes_written=patches * 8, macs=h * w * c, label="lasnet mask",
                        kernel="lasnet_mask")
    n = max(1, round(active))
    halo = patch + 2
    weights = 9 * c * c * 4

    def conv(width: int, out_pixels: int, label: str, kernel: str) -> DispatchCost:
        # one invocation per (row tile of tx pixels, output slice): per tap and input slice, tx input loads and
        # 4 weight loads feed 4 * tx dot products of 4 multiply-adds (lowering/kernels/lasnet.py, the WGSL)
        tx = _row_tile(width)
        jobs = width * math.ceil(width / tx) * c4
        return DispatchCost(invocations=n * _WORKGROUP * math.ceil(jobs / _WORKGROUP), active=n * jobs,
                            workgroups=n, work=9 * c4 * ((tx + 4) * _LOAD + 16 * tx),
                            bytes_read=n * (width + 2) ** 2 * c * 4 + weights, bytes_written=n * out_pixels * c * 4,
                            macs=n * out_pixels * 9 * c * c, label=label, kernel=kernel)

    gather = conv(halo, halo * halo, "lasnet gather conv", "lasnet_conv_gather")
    scatter = conv(patch, patch * patch, "lasnet scatter conv", "lasnet_conv_scatter")
    return [mask, gather, scatter] if active > 0 else [mask]


def predict_block_ns(device: Device, h: int, w: int, c: int, cell: int, patch: int, rate: float,
                     dense: bool = False) -> float:
    """Predicted GPU time of the block at execution patch `patch` (every patch when `dense`), copy of x included."""
    active = math.ceil(h / patch) * math.ceil(w / patch) if dense else expected_active(h, w, cell, patch, rate)
    copy = DispatchCost(invocations=1, active=1, workgroups=0, work=0.0, bytes_read=h * w * c * 4,
                        bytes_written=h * w * c * 4, macs=0)
    return memory_ns(copy, device) + sum(predict_ns(cost, device) for cost in _costs(h, w, c, cell, patch, active))


def choose_execution(device: Device, h: int, w: int, c: int, cell: int, rate: float, dense_ns: float,
                     patches: tuple[int, ...] = PATCHES) -> tuple[str, int, dict[str, float]]:
    """("sparse", S) for the fastest predicted patch size S, or ("dense", 0) when `dense_ns` (the same model's
    prediction of the block's dense dispatches, the engine's own kernels) is no slower; with every option's
    predicted ns ("sparse S", "dense")."""
    options = {f"sparse {p}": predict_block_ns(device, h, w, c, cell, p, rate) for p in patches if p <= max(h, w)}
    options["dense"] = dense_ns
    best = min(options, key=lambda k: (options[k], k != "dense"))  # a tie goes to dense
    return ("dense", 0, options) if best == "dense" else ("sparse", int(best.split()[1]), options)
