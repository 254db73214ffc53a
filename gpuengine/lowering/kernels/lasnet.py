"""LASNet spatially sparse execution of a masked residual block (passes/lasnet_blocks.MaskedBlock): three WGSL
kernels (shaders/lasnet_*.wgsl) and the prepared constants they bind. runtime/sparse_block.py runs them:

1. lasnet_mask: the masker per cell and the compacted list of active P x P patches (an atomic counter that is
   also the x count of the indirect dispatches after it);
2. lasnet_conv_gather: the first 3x3 conv over each active patch plus a one-pixel halo (gather fused);
3. lasnet_conv_scatter: the second 3x3 conv over each active patch, times the mask, plus x, into out (scatter
   fused).

P (the execution patch) need not be the model's cell: a patch runs when any cell it overlaps is active, and the
mask multiplies per pixel, so any P gives the dense block's values. With mode "all", every patch runs (the same
kernels, no skipping): the baseline sparse execution is compared with. Only numbers are baked into the WGSL.
"""

from __future__ import annotations

import numpy as np

from ...passes.lasnet_blocks import MaskedBlock
from .. import codegen

PATCHES = (2, 4, 8, 16)  # execution patch sizes offered (pixels per side)
WORKGROUP = 64  # the mask kernel's workgroup (one invocation per patch)
TX = 4  # pixels of a row one conv invocation computes (each weight load serves TX pixels)


def supports(block: MaskedBlock, patch: int) -> str | None:
    """None when the kernels can run `block` with `patch`; else why not (the block then runs densely)."""
    h, w, c = block.shape
    if c % 4:
        return f"{c} channels: the sparse kernels read whole vec4 channel slices"
    if patch < 1 or patch > max(h, w):
        return f"patch {patch} does not fit a {h}x{w} map"
    return None


def geometry(block: MaskedBlock, patch: int) -> dict[str, int]:
    """Patch grid of `block` at `patch`: patches across (npx), down (npy), in all (np); cells across (ncx)."""
    h, w, _ = block.shape
    npx, npy = -(-w // patch), -(-h // patch)
    return {"npx": npx, "npy": npy, "np": npx * npy, "ncx": w // block.cell,
            "cells": (h // block.cell) * (w // block.cell)}


MODES = ("mask", "all", "none")  # which patches run: the mask's, every one (dense), none (the cost of the rest)


def sources(block: MaskedBlock, patch: int, mode: str = "mask") -> dict[str, str]:
    """The three kernels' WGSL for `block` at execution patch `patch`; `mode`: MODES."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")
    reason = supports(block, patch)
    if reason is not None:
        raise ValueError(reason)
    h, w, c = block.shape
    g = geometry(block, patch)
    lit = codegen.literal
    common = {"H": lit(h), "W": lit(w), "C4": lit(c // 4), "P": lit(patch), "NPX": lit(g["npx"])}
    return {
        "mask": codegen.load_template("lasnet_mask").substitute(
            common, CELL=lit(block.cell), NP=lit(g["np"]), NCX=lit(g["ncx"]), BIAS=lit(float(block.masker_bias)),
            THRESHOLD=lit(float(block.threshold)), KEEP=lit(MODES.index(mode))),
        "gather": codegen.load_template("lasnet_conv_gather").substitute(
            common, RELU=lit(bool(block.conv1_relu)), TX=lit(row_tile(patch + 2))),
        "scatter": codegen.load_template("lasnet_conv_scatter").substitute(
            common, CELL=lit(block.cell), NCX=lit(g["ncx"]), TX=lit(row_tile(patch))),
    }


def row_tile(width: int) -> int:
    """Pixels of a row one conv invocation computes: up to TX, a divisor of the row's width when one is >= 2 (no
    invocation computes pixels past the row)."""
    for tx in range(min(TX, width), 1, -1):
        if width % tx == 0:
            return tx
    return min(TX, width)


def constants(block: MaskedBlock) -> dict[str, np.ndarray]:
    """The arrays the kernels bind, float32: masker weights [C]; each conv's OHWI weights flattened (their input
    channels are the innermost, whole vec4s) and bias [C]."""
    return {
        "masker": np.ascontiguousarray(block.masker_weights, np.float32),
        "w1": np.ascontiguousarray(block.conv1[0], np.float32).reshape(-1),
        "b1": np.ascontiguousarray(block.conv1[1], np.float32),
        "w2": np.ascontiguousarray(block.conv2[0], np.float32).reshape(-1),
        "b2": np.ascontiguousarray(block.conv2[1], np.float32),
    }


def tmp_bytes(block: MaskedBlock, patch: int) -> int:
    """Scratch of the first conv's output: every patch's slot of (P + 2)^2 pixels x C channels, float32."""
    return geometry(block, patch)["np"] * (patch + 2) ** 2 * block.shape[2] * 4


def macs(block: MaskedBlock, patch: int, active: int) -> int:
    """Multiply-adds of the two convs over `active` patches (the first conv's halo included)."""
    c = block.shape[2]
    return active * ((patch + 2) ** 2 + patch * patch) * 9 * c * c


__all__ = ["MODES", "PATCHES", "constants", "geometry", "macs", "row_tile", "sources", "supports", "tmp_bytes"]
