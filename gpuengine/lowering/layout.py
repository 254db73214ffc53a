"""PHWC4: the GPU tensor layout. [B, H, W, C] is stored as B x ceil(C/4) slices of [H, W, 4], zero-padded.

Rank < 4 tensors are mapped to BHWC by one rule, keeping the last axis as channels so per-channel ops and
channel broadcasting mean the same thing at every rank:
  rank 0 () -> (1, 1, 1, 1); rank 1 (C,) -> (1, 1, 1, C); rank 2 (B, C) -> (B, 1, 1, C);
  rank 3 (B, W, C) -> (B, 1, W, C); rank 4 unchanged. Higher ranks do not run on the GPU.
Element (b, h, w, c) lives at float index (((b * S + c // 4) * H + h) * W + w) * 4 + c % 4, S = ceil(C / 4).
"""

from __future__ import annotations

import numpy as np


def to_bhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return (1, 1, 1, 1)
    if len(shape) == 1:
        return (1, 1, 1, shape[0])
    if len(shape) == 2:
        return (shape[0], 1, 1, shape[1])
    if len(shape) == 3:
        return (shape[0], 1, shape[1], shape[2])
    if len(shape) == 4:
        return shape  # type: ignore[return-value]
    raise ValueError(f"rank {len(shape)} tensors have no PHWC4 layout")


def slices(channels: int) -> int:
    return (channels + 3) // 4


def phwc4_elements(shape: tuple[int, ...]) -> int:
    """Number of f32 elements the PHWC4 storage of a tensor of this (logical) shape holds."""
    b, h, w, c = to_bhwc(shape)
    return b * slices(c) * h * w * 4


def stored_as_bhwc(shape: tuple[int, ...], padded: bool = True) -> bool:
    """Whether a tensor's PHWC4 storage is byte-for-byte its dense BHWC array, so a boundary needs no converter:
    C % 4 == 0 with one slice or one pixel per batch (H * W == 1); or, where `padded`, one pixel (B * H * W == 1),
    whose PHWC4 slices are the BHWC values followed by zero padding to a whole vec4 (which the buffer then holds)."""
    b, h, w, c = to_bhwc(shape)
    if b * h * w * c == 0:
        return False
    if c % 4 == 0:
        return c == 4 or h * w == 1
    return padded and b * h * w == 1


def phwc4_index(shape: tuple[int, ...], b: int, h: int, w: int, c: int) -> int:
    _, hh, ww, cc = to_bhwc(shape)
    return (((b * slices(cc) + c // 4) * hh + h) * ww + w) * 4 + c % 4


def to_phwc4(array: np.ndarray) -> np.ndarray:
    """Logical tensor -> flat PHWC4 float32 array (padding lanes are zero)."""
    b, h, w, c = to_bhwc(array.shape)
    s = slices(c)
    padded = np.zeros((b, h, w, s * 4), np.float32)
    padded[..., :c] = np.asarray(array, np.float32).reshape(b, h, w, c)
    return padded.reshape(b, h, w, s, 4).transpose(0, 3, 1, 2, 4).reshape(-1)


def from_phwc4(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Flat PHWC4 array -> logical tensor of `shape`."""
    b, h, w, c = to_bhwc(shape)
    s = slices(c)
    data = np.asarray(flat, np.float32)[: b * s * h * w * 4].reshape(b, s, h, w, 4)
    return data.transpose(0, 2, 3, 1, 4).reshape(b, h, w, s * 4)[..., :c].reshape(shape)
