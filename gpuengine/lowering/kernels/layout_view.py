"""Layout views: a chain of RESHAPE / TRANSPOSE ops folded into the reads or writes of the kernel beside them.

The multi-head split of attention, [B, T, H*D] -> RESHAPE [B, T, H, D] -> TRANSPOSE [B, H, T, D], and the merge
back, change PHWC4 storage, so as ops each is a copy dispatch. As a view (passes/fold_matmul_layout.py), the
matmul reads element (b, h, t, d) of its operand straight from the FULLY_CONNECTED output at (b, t, h*D + d), and
writes its result where the merge would have put it. A view is a tuple of Steps from the stored tensor to the
logical one; the maps are built with kernels/index_map.py's Ix arithmetic, whose numpy side proves them in bounds
and tells when 4 adjacent channels stay 4 aligned adjacent channels (vec4 loads and stores).
"""

from __future__ import annotations

import functools

import numpy as np

from ...model.ops import STEP_KINDS
from ...model.ops import ViewStep as Step
from .index_map import Case, Ix, analyse, storage_index


def backward(steps: tuple[Step, ...], coords: list[Ix]) -> list[Ix]:
    """Coordinates in the stored tensor (before the first step) of logical coordinates after the last step."""
    for step in reversed(steps):
        if step.kind == "SLICE":
            coords = [c + b for c, b in zip(coords, step.perm)]
        elif step.kind == "BROADCAST":
            coords = [Ix.const(0) if d == 1 else c for c, d in zip(coords, step.in_shape)]
        elif step.kind == "TRANSPOSE":
            src: list[Ix] = [Ix.const(0)] * len(step.in_shape)
            for j, axis in enumerate(step.perm):
                src[axis] = coords[j]
            coords = src
        else:
            coords = _unflatten(_flatten(coords, step.out_shape), step.in_shape)
    return coords


def forward(steps: tuple[Step, ...], coords: list[Ix]) -> list[Ix]:
    """Coordinates after the last step of coordinates in the tensor before the first."""
    for step in steps:
        if step.kind in ("SLICE", "BROADCAST"):
            raise ValueError(f"no output view through a {step.kind}")
        if step.kind == "TRANSPOSE":
            coords = [coords[axis] for axis in step.perm]
        else:
            coords = _unflatten(_flatten(coords, step.in_shape), step.out_shape)
    return coords


def _flatten(coords: list[Ix], shape: tuple[int, ...]) -> Ix:
    linear = Ix.const(0)
    for coord, dim in zip(coords, shape):
        linear = linear * dim + (Ix.const(0) if dim == 1 else coord)
    return linear


def _unflatten(linear: Ix, shape: tuple[int, ...]) -> list[Ix]:
    out = []
    stride = int(np.prod(shape, dtype=np.int64)) if shape else 1
    for dim in shape:
        stride //= dim
        out.append(Ix.const(0) if dim == 1 else linear // stride % dim)
    return out


def _named(shape: tuple[int, ...], names: tuple[str, ...]) -> list[Ix]:
    """Symbolic coordinates (WGSL names, no numpy values needed) of a tensor of `shape`; size-1 axes are 0."""
    return [Ix.const(0) if dim == 1 else Ix(name, np.int64(0)) for dim, name in zip(shape, names)]


def check(steps: tuple[Step, ...]) -> str | None:
    """Why the chain is no view (shapes that do not chain, a RESHAPE changing the size), or None."""
    for a, b in zip(steps, steps[1:]):
        if a.out_shape != b.in_shape:
            return "view steps do not chain"
    for step in steps:
        if step.kind not in STEP_KINDS:
            return f"{step.kind} is no view"
        if len(step.in_shape) > 4 or len(step.out_shape) > 4:
            return "view of rank > 4"
        if step.kind == "TRANSPOSE" and sorted(step.perm) != list(range(len(step.in_shape))):
            return "TRANSPOSE view with an invalid permutation"
        if step.kind == "RESHAPE" and np.prod(step.in_shape) != np.prod(step.out_shape):
            return "RESHAPE view changes the element count"
        if step.kind == "SLICE" and not _slice_in_bounds(step):
            return "SLICE view out of bounds"
        if step.kind == "BROADCAST" and (len(step.in_shape) != len(step.out_shape) or any(
                i not in (1, o) for i, o in zip(step.in_shape, step.out_shape))):
            return "BROADCAST view that is no same-rank broadcast"
    return None


def _slice_in_bounds(step: Step) -> bool:
    n = len(step.in_shape)
    return len(step.perm) == n == len(step.out_shape) and all(
        b >= 0 and b + size <= dim for b, size, dim in zip(step.perm, step.out_shape, step.in_shape))


@functools.lru_cache(maxsize=4096)  # identical layers ask for identical views: evaluate each map once
def reader(steps: tuple[Step, ...], name: str, params: tuple[str, ...]) -> tuple[str, str, bool]:
    """WGSL statements reading logical (`params`..., channel) of the view as a vec4 `value` from binding `name`.

    params name the logical coordinates except the channel, in order; the channel slice is `sl`. Returns the
    statements, the binding's element type (S4 for vec4 loads, S1 per lane) and whether loads are vec4."""
    logical, stored = steps[-1].out_shape, steps[0].in_shape
    info = analyse(logical, [stored], lambda coords: [Case(0, backward(steps, coords))])
    c = logical[-1]
    vec4 = info.vec4 and c % 4 == 0
    coords = backward(steps, [*_named(logical[:-1], params), Ix("c", np.int64(0))])
    flat, vec = storage_index(stored, coords)
    if vec4:
        return f"let c = sl * 4u;\n  let value = vec4<f32>({name}[{vec.code}]);", "S4", True
    body = (f"var value = vec4<f32>(0.0);\n  for (var l = 0u; l < 4u; l++) {{\n    let c = sl * 4u + l;\n"
            f"    if (c >= {c}u) {{ break; }}\n    value[l] = f32({name}[{flat.code}]);\n  }}")
    return body, "S1", False


@functools.lru_cache(maxsize=4096)
def writer_index(steps: tuple[Step, ...], params: tuple[str, ...]) -> str | None:
    """WGSL expression of the output vec4 index in the final tensor of logical (params..., channel slice `ns`),
    or None when 4 adjacent logical channels are not 4 aligned adjacent channels there (no vec4 store)."""
    logical, final = steps[0].in_shape, steps[-1].out_shape
    if logical[-1] % 4 or final[-1] % 4:
        return None
    info = analyse(logical, [final], lambda coords: [Case(0, forward(steps, coords))])
    if not info.vec4:
        return None
    coords = forward(steps, [*_named(logical[:-1], params), Ix("ns", np.int64(0)) * 4])
    _, vec = storage_index(final, coords)
    return vec.code
