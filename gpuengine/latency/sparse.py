"""The latency model's prediction for LASNet sparse execution of a masked residual block (lowering/kernels/lasnet.py,
runtime/sparse_block.py), and the choice it makes per block: the execution patch size S, or dense execution (every
patch) when the expected activation rate leaves too little to skip.

The block's three dispatches (the mask kernel: masker, compaction and out = x over inactive patches, one invocation
per patch; the args kernel: the indirect count; the block kernel: both convs over one active patch per workgroup)
become DispatchCosts priced by
predict_ns, the same model and device description every other kernel is priced with. Their templates' efficiencies
are fitted from lavapipe timings of these kernels (tuning/sparse.py calibration_samples and fit, as `gpuengine
calibrate` fits the others; latency/devices.py lavapipe). The active patches are an expectation: with cells active
independently at rate r, a patch overlapping k cells runs with probability 1 - (1 - r)^k, so a large S wastes work
on inactive pixels and a small S recomputes more halo.
"""

from __future__ import annotations

import math

from .latency import Device, DispatchCost, predict_ns

__all__ = ["PATCHES", "PIXELS", "best_pixels", "block_costs", "choose_execution", "expected_active",
           "predict_block_ns"]

PATCHES = (2, 4, 8, 16)
PIXELS = (8, 1)  # the block kernel's decompositions (lowering/kernels/lasnet.PIXELS)
_LOAD = 8.0  # cost units of one vec4 load (lowering/kernels/tiling.py LOAD)
_MASK_WORKGROUP = 64


def _row_tile(width: int, most: int = 8) -> int:
    """The kernels' row tile (lowering/kernels/lasnet.row_tile, which this layer cannot import)."""
    for tx in range(min(most, width), 1, -1):
        if width % tx == 0:
            return tx
    return min(most, width)


def _block_workgroup(jobs: int, most: int = 64) -> int:
    """The block kernel's workgroup (lowering/kernels/lasnet.block_workgroup)."""
    rounds = -(-jobs // most)
    per_round = -(-jobs // rounds)
    return min(most, -(-per_round // 8) * 8)


def _cells_per_patch(patch: int, cell: int) -> int:
    """Masker cells an aligned patch overlaps (1 when the patch is inside one cell)."""
    side = max(1, math.ceil(patch / cell))
    return side * side


def expected_active(h: int, w: int, cell: int, patch: int, rate: float) -> float:
    """Expected active patches when each cell is active with probability `rate`, independently."""
    patches = math.ceil(h / patch) * math.ceil(w / patch)
    return patches * (1.0 - (1.0 - min(max(rate, 0.0), 1.0)) ** _cells_per_patch(patch, cell))


def block_costs(h: int, w: int, c: int, cell: int, patch: int, active: float, pixels: int = 8) -> list[DispatchCost]:
    """The mask kernel's, the args kernel's and (with any patch active) the block kernel's costs at `active`
    patches, the block kernel's invocations computing up to `pixels` pixels of a row (PIXELS)."""
    c4 = c // 4
    patches = math.ceil(h / patch) * math.ceil(w / patch)
    n = max(0, round(active))
    k = _cells_per_patch(patch, cell)
    # one invocation per patch: the cells it overlaps (CELL^2 loads per slice and a dot each), then either a list
    # entry or, for an inactive patch, its pixels copied (a load and a store per vec4): on average by the share
    copy = (1.0 - min(n, patches) / patches) * patch * patch * c4 * (_LOAD + 1)
    groups = math.ceil(patches / _MASK_WORKGROUP)
    mask = DispatchCost(invocations=groups * _MASK_WORKGROUP, active=patches, workgroups=groups,
                        work=k * (cell * cell * c4 * _LOAD + 4 * c4) + copy, bytes_read=h * w * c * 4,
                        bytes_written=(patches - min(n, patches)) * patch * patch * c * 4 + patches * 4,
                        macs=h * w * c, label="lasnet mask", kernel="lasnet_mask")
    args = DispatchCost(invocations=1, active=1, workgroups=1, work=4 * _LOAD, bytes_read=4, bytes_written=16,
                        macs=1, label="lasnet args", kernel="lasnet_args")
    if n == 0:
        return [mask, args]
    halo, side = patch + 2, patch + 4

    def conv(width: int) -> tuple[int, float]:
        # jobs of (row, segment of t pixels, output slice): per tap row and input slice, t + 2 input loads and
        # three mat4x4 loads feeding 3 * t mat-vec products of 16 multiply-adds
        t = _row_tile(width, pixels)
        return width * math.ceil(width / t) * c4, 3 * c4 * ((t + 2) * _LOAD + 3 * (4 * _LOAD + 16 * t))

    jobs1, work1 = conv(halo)
    jobs2, work2 = conv(patch)
    wg = _block_workgroup(max(jobs1, jobs2), 64 if pixels > 1 else 256)
    work = (side * side * c4 * _LOAD + jobs1 * work1 + jobs2 * work2) / wg  # the gather shared by the workgroup
    block = DispatchCost(invocations=n * wg, active=n * wg, workgroups=n, work=work,
                         bytes_read=n * side * side * c * 4 + 2 * 9 * c * c * 4,
                         bytes_written=n * patch * patch * c * 4,
                         macs=n * (halo * halo + patch * patch) * 9 * c * c, barriers=2,
                         workgroup_memory=(side * side + halo * halo) * c * 4, label="lasnet block",
                         kernel="lasnet_block")
    return [mask, args, block]


def predict_block_ns(device: Device, h: int, w: int, c: int, cell: int, patch: int, rate: float,
                     dense: bool = False, pixels: int | None = None) -> float:
    """Predicted GPU time of the block at execution patch `patch` (every patch when `dense`), in the decomposition
    `pixels` (None: the one predicted fastest, best_pixels)."""
    active = math.ceil(h / patch) * math.ceil(w / patch) if dense else expected_active(h, w, cell, patch, rate)
    return min(sum(predict_ns(cost, device) for cost in block_costs(h, w, c, cell, patch, active, p))
               for p in (PIXELS if pixels is None else (pixels,)))


def best_pixels(device: Device, h: int, w: int, c: int, cell: int, patch: int, rate: float) -> int:
    """The block kernel's decomposition predicted fastest on `device` at `rate` (PIXELS; the first on a tie)."""
    return min(PIXELS, key=lambda p: predict_block_ns(device, h, w, c, cell, patch, rate, pixels=p))


def choose_execution(device: Device, h: int, w: int, c: int, cell: int, rate: float, dense_ns: float,
                     patches: tuple[int, ...] = PATCHES) -> tuple[str, int, dict[str, float]]:
    """("sparse", S) for the fastest predicted patch size S, or ("dense", 0) when `dense_ns` (the same model's
    prediction of the block's dense dispatches, the engine's own kernels) is no slower; with every option's
    predicted ns ("sparse S", "dense")."""
    options = {f"sparse {p}": predict_block_ns(device, h, w, c, cell, p, rate) for p in patches if p <= max(h, w)}
    options["dense"] = dense_ns
    best = min(options, key=lambda k: (options[k], k != "dense"))  # a tie goes to dense
    return ("dense", 0, options) if best == "dense" else ("sparse", int(best.split()[1]), options)
