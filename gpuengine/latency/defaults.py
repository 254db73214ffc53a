"""Default workgroup sizes for untuned kernels.

Like TFLite's per-GPU table, but from the grid alone: aim for 64 invocations (two warps/one wavefront),
fill x (adjacent columns: coalesced PHWC4 reads) first up to 16, then y, then z (slices), never exceeding
what the grid can use so small layers do not launch mostly idle workgroups.
"""

from __future__ import annotations

TARGET_INVOCATIONS = 64


def _pow2_at_most(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


def _pow2_cover(n: int, cap: int) -> int:
    """Smallest power of two >= n, capped."""
    p = 1
    while p < n and p * 2 <= cap:
        p *= 2
    return p


def default_workgroup(grid: tuple[int, int, int], max_invocations: int = 256) -> tuple[int, int, int]:
    target = min(TARGET_INVOCATIONS, max_invocations)
    x = _pow2_cover(grid[0], min(16, target))
    y = _pow2_cover(grid[1], max(1, target // x))
    z = _pow2_cover(grid[2], max(1, target // (x * y)))
    return (x, y, z)
