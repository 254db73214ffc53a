"""LASNet spatially sparse execution of a masked residual block (passes/lasnet_blocks.MaskedBlock): three WGSL
kernels (shaders/lasnet_mask.wgsl, lasnet_args.wgsl, lasnet_block.wgsl) and the prepared constants they bind, as
KernelSpecs a GPU program records (lowering/lasnet.py) or runtime/sparse_block.py runs on buffers of its own:

1. lasnet_mask, one invocation per P x P execution patch: the masker of each cell the patch overlaps (average over
   the cell, 1x1 conv, threshold), then the patch's id appended to the active list through an atomic counter, or,
   when no cell it overlaps is active, its pixels of out set to x (the dense block's value there: x + branch * 0).
2. lasnet_args, one invocation: the count becomes the x count of the indirect dispatch that follows, and the
   counter is cleared for the next invoke (no host round trip, no clear_buffer).
3. lasnet_block, dispatched indirectly, one workgroup per active patch: x around the patch (two pixels of halo,
   zero outside the image) into workgroup memory (the gather), the first 3x3 conv over the patch plus one pixel of
   halo into workgroup memory, the second 3x3 conv over the patch, times the mask, plus x, stored to the patch's
   pixels of out (the scatter). Weights are mat4x4 blocks; each invocation computes a row segment of T pixels of
   one output slice, the T + 2 inputs of a tap row loaded once for the row's three taps.

P (the execution patch) need not be the model's cell: a patch runs when any cell it overlaps is active, and the
mask multiplies per pixel, so any P gives the dense block's values. With mode "all", every patch runs (the same
kernels, no skipping); with "none", none does (what the block costs besides its convs): the two ends of
tuning/sparse.py's measurement. Only numbers, and code this module writes, are baked into the WGSL.
"""

from __future__ import annotations

import numpy as np

from ...passes.lasnet_blocks import MaskedBlock
from .. import codegen
from .base import Binding, KernelSpec

PATCHES = (2, 4, 8, 16)  # execution patch sizes offered (pixels per side), where supports() allows
MASK_WORKGROUP = 64  # the mask kernel's workgroup (one invocation per patch)
MOST_PIXELS = 8  # pixels of a row one conv invocation computes, at most (accumulators held in registers)
# the block kernel's decompositions: pixels of a row an invocation computes at most (8: fat invocations that reuse
# each load, for a CPU adapter's few wide lanes; 1: a pixel and output slice each, for a GPU's many lanes); the
# latency model picks one per block (latency/sparse.best_pixels)
PIXELS = (MOST_PIXELS, 1)
MOST_WORKGROUP = {MOST_PIXELS: 64, 1: 256}  # invocations of a block kernel's workgroup at most, per decomposition
WORKGROUP_BYTES = 16384  # WebGPU's guaranteed workgroup memory (maxComputeWorkgroupStorageSize)
MODES = ("mask", "all", "none")  # which patches run: the mask's, every one (dense), none (the cost of the rest)
KERNELS = ("mask", "args", "block")


def workgroup_bytes(channels: int, patch: int) -> int:
    """Workgroup memory of the block kernel: x around the patch ((P + 4)^2 pixels) and the first conv's output
    ((P + 2)^2 pixels), C channels of f32 each."""
    return ((patch + 4) ** 2 + (patch + 2) ** 2) * channels * 4


def supports(block: MaskedBlock, patch: int) -> str | None:
    """None when the kernels can run `block` with `patch`; else why not (the block then runs densely)."""
    h, w, c = block.shape
    if c % 4:
        return f"{c} channels: the sparse kernels read whole vec4 channel slices"
    if patch < 1 or patch > max(h, w):
        return f"patch {patch} does not fit a {h}x{w} map"
    if workgroup_bytes(c, patch) > WORKGROUP_BYTES:
        return (f"patch {patch} at {c} channels needs {workgroup_bytes(c, patch)} bytes of workgroup memory, more "
                f"than WebGPU's guaranteed {WORKGROUP_BYTES}")
    return None


def geometry(block: MaskedBlock, patch: int) -> dict[str, int]:
    """Patch grid of `block` at `patch`: patches across (npx), down (npy), in all (np); cells across (ncx)."""
    h, w, _ = block.shape
    npx, npy = -(-w // patch), -(-h // patch)
    return {"npx": npx, "npy": npy, "np": npx * npy, "ncx": w // block.cell,
            "cells": (h // block.cell) * (w // block.cell)}


def row_tile(width: int, most: int = MOST_PIXELS) -> int:
    """Pixels of a row one conv invocation computes: the largest divisor of the row's width up to `most` (no
    invocation computes pixels past the row) when it is >= 2, else `most` (a prime width)."""
    for tx in range(min(most, width), 1, -1):
        if width % tx == 0:
            return tx
    return min(most, width)


def jobs(channels: int, patch: int, pixels: int = MOST_PIXELS) -> tuple[int, int]:
    """Invocation jobs of the block kernel's two convs: (row, segment, output slice) triples."""
    c4 = channels // 4
    halo = patch + 2
    return (halo * -(-halo // row_tile(halo, pixels)) * c4, patch * -(-patch // row_tile(patch, pixels)) * c4)


def block_workgroup(channels: int, patch: int, pixels: int = MOST_PIXELS) -> int:
    """The block kernel's workgroup: its largest conv's jobs in as few rounds of at most MOST_WORKGROUP invocations
    as they need, a multiple of 8 (a SIMD width of software adapters) so no invocation idles for long."""
    most = max(jobs(channels, patch, pixels))
    cap = MOST_WORKGROUP[pixels]
    rounds = -(-most // cap)
    per_round = -(-most // rounds)
    return min(cap, -(-per_round // 8) * 8)


def _conv_rows(t: int, weights: str, src: str, row: str, side: str) -> codegen.Code:
    """The unrolled inner loop of one conv job: for tap row ky and input slice i, the T + 2 inputs of row `row` + ky
    from `src` (a workgroup array, `side` pixels wide) loaded once, each of the three taps' mat4x4 (four vec4
    columns) loaded once for the T pixels (accumulators a0.. a{T-1})."""
    lines = [f"let base = (({row} + ky) * {side} + c0) * C4 + i;"]
    lines += [f"let v{k} = {src}[base + {k}u * C4];" for k in range(t + 2)]
    lines.append("let wk = ((o4 * 9u + ky * 3u) * C4 + i) * 4u;")
    for kx in range(3):
        at = f"wk + {4 * kx}u * C4"
        lines.append(f"let m{kx} = mat4x4<f32>({weights}[{at}], {weights}[{at} + 1u], {weights}[{at} + 2u], "
                     f"{weights}[{at} + 3u]);")
        lines += [f"a{p} += m{kx} * v{p + kx};" for p in range(t)]
    return codegen.Code("\n                ".join(lines))


LAYOUTS = {  # the vec4 index of (row y, column x, channel slice s) of a tensor [1, H, W, C]
    "bhwc": "(y * u32(W) + x) * C4 + s",  # the runner's own buffers (runtime/sparse_block.py)
    "phwc4": "(s * u32(H) + y) * u32(W) + x",  # a GPU program's tensors (lowering/layout.py)
}


def specs(block: MaskedBlock, patch: int, mode: str = "mask", layout: str = "phwc4", key: str = "",
          active: float | None = None, pixels: int = MOST_PIXELS) -> list[KernelSpec]:
    """The block's three dispatches at execution patch `patch`: the mask kernel, the args kernel and the block kernel
    (`indirect`: one workgroup per active patch, the count in the "args" scratch buffer the args kernel writes).
    They read tensor block.x and write tensor block.out in `layout` (LAYOUTS); their scratch (cells, the active list,
    the indirect arguments) is keyed by `key`, so the two dispatches share it. `mode`: MODES. `active`: the active
    patches expected (default: every one), param ACTIVE, which the latency model prices them at
    (kernels/dispatch_cost.py) and no template reads. `pixels`: the block kernel's decomposition (PIXELS)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")
    if pixels not in PIXELS:
        raise ValueError(f"pixels {pixels} is not one of {PIXELS}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {tuple(LAYOUTS)}")
    reason = supports(block, patch)
    if reason is not None:
        raise ValueError(reason)
    h, w, c = block.shape
    g = geometry(block, patch)
    code = codegen.Code
    key = key or f"lasnet{block.out}.{patch}.{mode}"
    consts = constants(block)
    common = {"H": h, "W": w, "C4": c // 4, "P": patch, "NPX": g["npx"], "CELL": block.cell, "NCX": g["ncx"],
              "AT": code(LAYOUTS[layout]), "ACTIVE": float(g["np"] if active is None else active), "PIXELS": pixels}

    def scratch(name: str, words: int, writable: bool) -> Binding:
        return Binding(name, scratch_bytes=max(16, words * 4), scratch_key=f"{key}.{name}", writable=writable,
                       element="u32")

    def const(name: str) -> Binding:
        return Binding(name, data=consts[name], element="vec4<f32>", bake=False)

    x, out = Binding("x", tensor=block.x), Binding("out", tensor=block.out, writable=True)
    count = Binding("count", scratch_bytes=16, scratch_key=f"{key}.count", writable=True, element="atomic<u32>")
    groups = -(-g["np"] // MASK_WORKGROUP)
    mask = KernelSpec("lasnet_mask", {**common, "NP": g["np"], "BIAS": float(block.masker_bias),
                                      "THRESHOLD": float(block.threshold), "KEEP": MODES.index(mode)},
                      [x, const("masker"), scratch("cells", g["cells"], True), count,
                       scratch("patches", g["np"], True), out],
                      (groups * MASK_WORKGROUP, 1, 1), (MASK_WORKGROUP, 1, 1), label="LASNet mask + active patches",
                      ops=list(block.ops), dispatch=(groups, 1, 1), macs=h * w * c)
    args = KernelSpec("lasnet_args", {"NP": g["np"], "ACTIVE": common["ACTIVE"], "H": h, "W": w, "C4": c // 4,
                                      "CELL": block.cell, "P": patch, "PIXELS": pixels},
                      [Binding("count", scratch_bytes=16, scratch_key=f"{key}.count", writable=True,
                               element="atomic<u32>"), scratch("args", 3, True)],
                      (1, 1, 1), (1, 1, 1), label="LASNet indirect count", ops=list(block.ops), dispatch=(1, 1, 1),
                      macs=1)
    t1, t2 = row_tile(patch + 2, pixels), row_tile(patch, pixels)
    acc = {t: (code(" ".join(f"var a{p} = b;" for p in range(t))), code(", ".join(f"a{p}" for p in range(t))))
           for t in (t1, t2)}
    wg = block_workgroup(c, patch, pixels)
    conv = KernelSpec("lasnet_block", {**common, "RELU": bool(block.conv1_relu), "T1": t1, "T2": t2,
                                       "XIN": (patch + 4) ** 2 * (c // 4), "MID": (patch + 2) ** 2 * (c // 4),
                                       "ACC1": acc[t1][0], "ACCS1": acc[t1][1], "ACC2": acc[t2][0],
                                       "ACCS2": acc[t2][1], "CONV1": _conv_rows(t1, "w1", "xin", "ry", "XS"),
                                       "CONV2": _conv_rows(t2, "w2", "mid", "qy", "R")},
                      [x, const("w1"), const("b1"), const("w2"), const("b2"), scratch("patches", g["np"], False),
                       scratch("cells", g["cells"], False), Binding("out", tensor=block.out, writable=True)],
                      (g["np"] * wg, 1, 1), (wg, 1, 1), label=f"LASNet convs over active {patch}x{patch} patches",
                      ops=list(block.ops), dispatch=(g["np"], 1, 1), macs=macs(block, patch, g["np"]),
                      indirect=f"{key}.args")
    return [mask, args, conv]


def sources(block: MaskedBlock, patch: int, mode: str = "mask", pixels: int = MOST_PIXELS) -> dict[str, str]:
    """The three kernels' WGSL for `block` at execution patch `patch` on the runner's BHWC buffers; `mode`: MODES;
    `pixels`: PIXELS."""
    return {k: codegen.render(spec) for k, spec in zip(KERNELS, specs(block, patch, mode, "bhwc", pixels=pixels))}


def mat4_weights(weights: np.ndarray) -> np.ndarray:
    """OHWI 3x3 weights [C, 3, 3, C] as mat4x4 blocks [out slice][tap][in slice] whose column j holds input channel
    4 * slice + j's weights for the block's 4 output channels (`m * v` is the tap's contribution)."""
    c = weights.shape[0]
    c4 = c // 4
    blocks = np.asarray(weights, np.float32).reshape(c4, 4, 9, c4, 4)  # [o4, o, tap, i4, j]
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 4, 1)).reshape(-1)  # [o4, tap, i4, j, o]


def constants(block: MaskedBlock) -> dict[str, np.ndarray]:
    """The arrays the kernels bind, float32: masker weights [C]; each conv's weights as mat4x4 blocks and bias [C]."""
    return {
        "masker": np.ascontiguousarray(block.masker_weights, np.float32),
        "w1": mat4_weights(block.conv1[0]),
        "b1": np.ascontiguousarray(block.conv1[1], np.float32),
        "w2": mat4_weights(block.conv2[0]),
        "b2": np.ascontiguousarray(block.conv2[1], np.float32),
    }


def macs(block: MaskedBlock, patch: int, active: int) -> int:
    """Multiply-adds of the two convs over `active` patches (the first conv's halo included)."""
    c = block.shape[2]
    return active * ((patch + 2) ** 2 + patch * patch) * 9 * c * c


__all__ = ["KERNELS", "LAYOUTS", "MODES", "MOST_PIXELS", "PATCHES", "PIXELS", "block_workgroup", "constants",
           "geometry", "jobs", "macs", "mat4_weights", "row_tile", "sources", "specs", "supports", "workgroup_bytes"]
