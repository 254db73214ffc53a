"""Ops that move values without computing them: reshape, transpose, concat, slice, pad, resize ...: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dims import is_symbolic
from ..ir import Graph, Op
from ._common import (
    ACTIVATION,
    F64,
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _axis,
    _broadcast,
    _ints,
    _r,
    _val,
    all_inputs_same_dtype,
    at_least,
    dims_product,
    finish_rules,
    index_dtype,
    one_of,
    ranks,
    registrar,
    same_dtype,
    same_values,
)

NAME = "shape and layout"
CODES: tuple[str, ...] = (
    "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "CONCATENATION", "PACK", "UNPACK", "SPLIT", "SPLIT_V",
    "SLICE", "STRIDED_SLICE", "TILE", "BROADCAST_TO", "PAD", "PADV2", "MIRROR_PAD", "SPACE_TO_DEPTH",
    "DEPTH_TO_SPACE", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "REVERSE_V2", "REVERSE_SEQUENCE", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "MATRIX_DIAG", "MATRIX_SET_DIAG")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def concat_shape(v: OpView) -> list[tuple[int, ...]]:
    shapes = [v.shape(i) for i in range(v.n_in)]
    rank = len(shapes[0])
    axis = v.axis(int(v.opt("axis")), rank)
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for d, (a, b) in enumerate(zip(s, shapes[0])) if d != axis):
            raise Invalid(f"input shapes {shapes} differ outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


def pack_shape(v: OpView) -> list[tuple[int, ...]]:
    shapes = {v.shape(i) for i in range(v.n_in)}
    if len(shapes) != 1:
        raise Invalid(f"inputs have different shapes {sorted(shapes)}")
    if int(v.opt("values_count")) != v.n_in:
        raise Invalid(f"values_count is {v.opt('values_count')} for {v.n_in} inputs")
    shape = v.shape(0)
    axis = v.axis(int(v.opt("axis")), len(shape) + 1)
    return [(*shape[:axis], v.n_in, *shape[axis:])]


def unpack_shape(v: OpView) -> list[tuple[int, ...]]:
    shape = v.shape(0)
    axis = v.axis(int(v.opt("axis")), len(shape))
    if shape[axis] != len(v.op.outputs) or int(v.opt("num")) not in (0, shape[axis]):
        raise Invalid(f"unpacking axis {axis} of {shape} gives {shape[axis]} outputs; the op has "
                      f"{len(v.op.outputs)} (num {v.opt('num')})")
    return [shape[:axis] + shape[axis + 1:]] * shape[axis]


def split_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axis_values = v.ints(0)
    n = int(v.opt("num_splits"))
    if n != len(v.op.outputs):
        raise Invalid(f"num_splits is {n} for {len(v.op.outputs)} outputs")
    if axis_values is None:
        return None
    if len(axis_values) != 1:
        raise Invalid(f"axis must be one value, got {axis_values}")
    shape = v.shape(1)
    axis = v.axis(axis_values[0], len(shape))
    if shape[axis] % n:
        raise Invalid(f"dimension {axis} of {shape} does not split into {n} equal parts")
    out = list(shape)
    out[axis] //= n
    return [tuple(out)] * n


def split_v_shape(v: OpView) -> list[tuple[int, ...]] | None:
    sizes, axis_values = v.ints(1), v.ints(2)
    n = int(v.opt("num_splits"))
    if n != len(v.op.outputs):
        raise Invalid(f"num_splits is {n} for {len(v.op.outputs)} outputs")
    if sizes is None or axis_values is None:
        return None
    shape = v.shape(0)
    if len(axis_values) != 1:
        raise Invalid(f"axis must be one value, got {axis_values}")
    axis = v.axis(axis_values[0], len(shape))
    if len(sizes) != n or sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise Invalid(f"size_splits {sizes} must be {n} sizes >= 0 (one may be -1)")
    known = sum(s for s in sizes if s >= 0)
    if (-1 in sizes and known > shape[axis]) or (-1 not in sizes and known != shape[axis]):
        raise Invalid(f"size_splits {sizes} do not add up to dimension {axis} of {shape}")
    outs = []
    for s in sizes:
        out = list(shape)
        out[axis] = s if s >= 0 else shape[axis] - known
        outs.append(tuple(out))
    return outs


def slice_shape(v: OpView) -> list[tuple[int, ...]] | None:
    begin, size = v.ints(1), v.ints(2)
    shape = v.shape(0)
    for name, i in (("begin", 1), ("size", 2)):
        if v.rank(i) != 1 or v.shape(i)[0] != len(shape):
            raise Invalid(f"{name} has shape {v.shape(i)}, must hold one value per input dimension ({len(shape)})")
    if begin is None or size is None:
        return None
    out = []
    for d, (b, n, dim) in enumerate(zip(begin, size, shape)):
        n = dim - b if n == -1 else n
        if b < 0 or n < 0 or b + n > dim:
            raise Invalid(f"begin {begin} and size {size} leave dimension {d} of {shape}")
        out.append(n)
    return [tuple(out)]


def strided_slice_checks(v: OpView) -> None:
    n = v.shape(1)[0] if v.rank(1) == 1 else -1
    for i, name in ((1, "begin"), (2, "end"), (3, "strides")):
        if v.rank(i) != 1 or v.shape(i)[0] != n:
            raise Invalid(f"begin, end and strides must be vectors of one length; {name} has shape {v.shape(i)}")
    if v.opt("ellipsis_mask") == 0 and v.opt("new_axis_mask") == 0 and n > v.rank(0):
        raise Invalid(f"{n} slice dimensions for an input of rank {v.rank(0)}")
    strides = v.ints(3)
    if strides is not None and 0 in strides:
        raise Invalid(f"strides {strides} contain 0")
    if v.rank(0) > 5:
        raise Invalid(f"input rank {v.rank(0)} is above 5, the most LiteRT slices")


def strided_slice_shape(v: OpView) -> list[tuple[int, ...]] | None:
    """The simple case (no ellipsis or new axis, constant begin/end/strides) computed with Python slices."""
    begin, end, strides = v.ints(1), v.ints(2), v.ints(3)
    if begin is None or end is None or strides is None or v.opt("ellipsis_mask") or v.opt("new_axis_mask"):
        return None
    shape = v.shape(0)
    out = []
    for d, dim in enumerate(shape):
        if d >= len(begin):
            out.append(dim)
            continue
        b, e, s = begin[d], end[d], strides[d]
        if v.opt("offset"):
            e = b + e
        if v.opt("shrink_axis_mask") >> d & 1:
            if not -dim <= b < dim:
                raise Invalid(f"shrunk dimension {d}: index {b} is out of range for size {dim}")
            continue
        b = None if v.opt("begin_mask") >> d & 1 else b
        e = None if v.opt("end_mask") >> d & 1 else e
        out.append(len(range(dim)[slice(b, e, s)]))
    return [tuple(out)]


def reshape_shape(v: OpView) -> list[tuple[int, ...]] | None:
    """Same number of values; a constant shape input (one -1 resolved) must be the declared output shape."""
    n_in = int(np.prod(v.shape(0), dtype=np.int64))
    n_out = int(np.prod(v.out_shape(), dtype=np.int64))
    if n_in != n_out:
        raise Invalid(f"input {v.shape(0)} has {n_in} values, output {v.out_shape()} {n_out}")
    target = v.ints(1) if v.n_in > 1 and v.rank(1) == 1 else None
    if target is None or target.count(-1) > 1 or min(target, default=0) < -1:
        return None
    known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
    if -1 in target:
        if known == 0 or n_in % known:
            raise Invalid(f"shape {target} cannot hold the input's {n_in} values")
        target = [n_in // known if d == -1 else d for d in target]
    return [tuple(target)]


def squeeze_shape(v: OpView) -> list[tuple[int, ...]]:
    shape = v.shape(0)
    dims = [v.axis(int(d), len(shape), "squeeze dimension") for d in v.opt("squeeze_dims") or []]
    if not dims:
        return [tuple(d for d in shape if d != 1)]
    for d in dims:
        if shape[d] != 1:
            raise Invalid(f"squeeze dimension {d} of {shape} is not 1")
    return [tuple(s for d, s in enumerate(shape) if d not in dims)]


def expand_dims_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axis = v.ints(1)
    if axis is None:
        return None
    if len(axis) != 1:
        raise Invalid(f"axis must be one value, got {axis}")
    shape = v.shape(0)
    a = v.axis(axis[0], len(shape) + 1)
    return [(*shape[:a], 1, *shape[a:])]


def transpose_shape(v: OpView) -> list[tuple[int, ...]] | None:
    perm = v.ints(1)
    shape = v.shape(0)
    if len(shape) > 6:
        raise Invalid(f"input rank {len(shape)} is above 6, the most LiteRT transposes")
    if perm is None:
        return None
    rank = len(shape)
    normalized = [p + rank if p < 0 else p for p in perm]
    if sorted(normalized) != list(range(rank)):
        raise Invalid(f"perm {perm} is not a permutation of the {rank} input dimensions")
    return [tuple(shape[p] for p in normalized)]


def pad_shape(v: OpView) -> list[tuple[int, ...]] | None:
    shape = v.shape(0)
    if v.shape(1) != (len(shape), 2):
        raise Invalid(f"paddings have shape {v.shape(1)}, must be [{len(shape)}, 2] for an input of rank "
                      f"{len(shape)}")
    pads = v.ints(1)
    if pads is None:
        return None
    if min(pads, default=0) < 0:
        raise Invalid(f"paddings {pads} contain a negative value")
    if v.op.code == "MIRROR_PAD":
        reflect = int(v.opt("mode")) == 0
        for d, dim in enumerate(shape):
            limit = dim - 1 if reflect else dim
            if max(pads[2 * d], pads[2 * d + 1]) > limit:
                raise Invalid(f"{'REFLECT' if reflect else 'SYMMETRIC'} padding {pads[2 * d:2 * d + 2]} of dimension "
                              f"{d} exceeds {limit} for size {dim}")
    return [tuple(dim + pads[2 * d] + pads[2 * d + 1] for d, dim in enumerate(shape))]


def padv2_value(v: OpView) -> None:
    if v.has(2) and v.tensor(2).size != 1:
        raise Invalid(f"constant_values has {v.tensor(2).size} values, must be one")


def resize_shape(v: OpView) -> list[tuple[int, ...]] | None:
    if v.shape(1) != (2,):
        raise Invalid(f"size has shape {v.shape(1)}, must be [2]")
    size = v.ints(1)
    if size is None:
        return None
    if any(not is_symbolic(d) and d <= 0 for d in size):  # symbolic sizes are >= 1
        raise Invalid(f"size {size} must be positive")
    b, _, _, c = v.shape(0)
    return [(b, size[0], size[1], c)]


def depth_to_space_shape(v: OpView) -> list[tuple[int, ...]]:
    b, h, w, c = v.shape(0)
    k = int(v.opt("block_size"))
    if c % (k * k):
        raise Invalid(f"{c} channels do not divide by block_size^2 = {k * k}")
    return [(b, h * k, w * k, c // (k * k))]


def space_to_depth_shape(v: OpView) -> list[tuple[int, ...]]:
    b, h, w, c = v.shape(0)
    k = int(v.opt("block_size"))
    if h % k or w % k:
        raise Invalid(f"height {h} and width {w} must be multiples of block_size {k}")
    return [(b, h // k, w // k, c * k * k)]


def _block_and_pads(v: OpView, what: str) -> tuple[list[int], list[int]] | None:
    spatial = v.rank(0) - 2
    if v.shape(1) != (spatial,) or v.shape(2) != (spatial, 2):
        raise Invalid(f"block_shape {v.shape(1)} and {what} {v.shape(2)} must be [{spatial}] and [{spatial}, 2]")
    block, pads = v.ints(1), v.ints(2)
    if block is None or pads is None:
        return None
    if min(block) < 1 or min(pads, default=0) < 0:
        raise Invalid(f"block_shape {block} must be >= 1 and {what} {pads} >= 0")
    return block, pads


def space_to_batch_shape(v: OpView) -> list[tuple[int, ...]] | None:
    got = _block_and_pads(v, "paddings")
    if got is None:
        return None
    block, pads = got
    shape = v.shape(0)
    out = [shape[0] * int(np.prod(block))]
    for d, k in enumerate(block):
        padded = shape[d + 1] + pads[2 * d] + pads[2 * d + 1]
        if padded % k:
            raise Invalid(f"padded dimension {d + 1} ({padded}) is not a multiple of block {k}")
        out.append(padded // k)
    return [(*out, *shape[len(block) + 1:])]


def batch_to_space_shape(v: OpView) -> list[tuple[int, ...]] | None:
    got = _block_and_pads(v, "crops")
    if got is None:
        return None
    block, crops = got
    shape = v.shape(0)
    n = int(np.prod(block))
    if shape[0] % n:
        raise Invalid(f"batch {shape[0]} is not a multiple of the block size {n}")
    out = [shape[0] // n]
    for d, k in enumerate(block):
        size = shape[d + 1] * k - crops[2 * d] - crops[2 * d + 1]
        if size < 0:
            raise Invalid(f"crops {crops[2 * d:2 * d + 2]} exceed dimension {d + 1} ({shape[d + 1] * k})")
        out.append(size)
    return [(*out, *shape[len(block) + 1:])]


def tile_shape(v: OpView) -> list[tuple[int, ...]] | None:
    shape = v.shape(0)
    if v.shape(1) != (len(shape),):
        raise Invalid(f"multiples have shape {v.shape(1)}, must be [{len(shape)}]")
    multiples = v.ints(1)
    if multiples is None:
        return None
    if min(multiples, default=0) < 0:
        raise Invalid(f"multiples {multiples} must be >= 0")
    return [tuple(d * m for d, m in zip(shape, multiples))]


def broadcast_to_shape(v: OpView) -> list[tuple[int, ...]] | None:
    target = v.ints(1)
    if target is None:
        return None
    if len(target) < v.rank(0) or min(target, default=0) < 0:
        raise Invalid(f"shape {target} cannot hold input {v.shape(0)}")
    got = _broadcast(v.shape(0), tuple(target))
    if got != tuple(target):
        raise Invalid(f"input {v.shape(0)} does not broadcast to {target}")
    return [tuple(target)]


RESIZE = _r(2, 1, checks=[ranks(in0=(4, 4)), index_dtype(1), same_dtype([0])], shape=resize_shape)


def _reshape_own_shape(v: OpView, g: Graph) -> list[tuple[int, ...]] | str:
    """Also with symbolic sizes (model/dims.py): a -1 is the input's size divided by the target's others."""
    n_in = dims_product(v.shape(0))
    target = v.ints(1) if v.n_in > 1 and v.has(1) and v.rank(1) == 1 else None
    if target is None and v.n_in > 1 and v.has(1) and v.rank(1) == 1:
        return f"its target shape {v.tensor(1).name!r} is computed at run time"
    if target is None:
        option = v.op.opt("new_shape")
        target = [int(d) for d in option] if option else list(v.out_shape())
    if target.count(-1) > 1 or any(not is_symbolic(d) and d < -1 for d in target):
        raise Invalid(f"shape {target} has more than one -1 or a negative size")
    known = dims_product([d for d in target if is_symbolic(d) or d != -1])
    symbolic = is_symbolic(n_in) or is_symbolic(known)
    if -1 in target:
        if known == 0 or n_in % known:
            raise Invalid(f"shape {target} cannot hold the input's {n_in} values ({v.shape(0)})")
        target = [n_in // known if not is_symbolic(d) and d == -1 else d for d in target]
    elif known != n_in and not symbolic:
        raise Invalid(f"input {v.shape(0)} has {n_in} values, shape {target} {known}")
    return [tuple(target)]


RULES: dict[str, Rule] = {
    "CONCATENATION": _r((1, None), 1, checks=[all_inputs_same_dtype(), ACTIVATION], shape=concat_shape),
    "PACK": _r((1, None), 1, checks=[all_inputs_same_dtype()], shape=pack_shape),
    "UNPACK": _r(1, (1, None), checks=[same_dtype([0])], shape=unpack_shape),
    "SPLIT": _r(2, (1, None), checks=[index_dtype(0), same_dtype([1])], shape=split_shape),
    "SPLIT_V": _r(3, (1, None), checks=[index_dtype(1, 2), same_dtype([0])], shape=split_v_shape),
    "SLICE": _r(3, 1, checks=[index_dtype(1, 2), same_dtype([0]), ranks(in0=(0, 5))], shape=slice_shape),
    "STRIDED_SLICE": _r(4, 1, checks=[index_dtype(1, 2, 3), same_dtype([0]), strided_slice_checks],
                        shape=strided_slice_shape),
    "TILE": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=tile_shape),
    "TRANSPOSE": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=transpose_shape),
    "RESHAPE": _r((1, 2), 1, checks=[same_dtype([0])], shape=reshape_shape),
    "SQUEEZE": _r(1, 1, checks=[same_dtype([0])], shape=squeeze_shape),
    "EXPAND_DIMS": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=expand_dims_shape),
    "PAD": _r(2, 1, checks=[index_dtype(1), same_dtype([0]), ranks(in0=(0, 5))], shape=pad_shape),
    "PADV2": _r(3, 1, checks=[index_dtype(1), same_dtype([0, 2]), ranks(in0=(0, 5)), padv2_value],
                shape=pad_shape),
    "MIRROR_PAD": _r(2, 1, checks=[index_dtype(1), same_dtype([0]), one_of("mode", (0, 1), " (REFLECT, SYMMETRIC)")],
                     shape=pad_shape),
    "RESIZE_BILINEAR": RESIZE,
    "RESIZE_NEAREST_NEIGHBOR": RESIZE,
    "DEPTH_TO_SPACE": _r(1, 1, checks=[ranks(in0=(4, 4)), same_dtype([0]), at_least("block_size", 1)],
                         shape=depth_to_space_shape),
    "SPACE_TO_DEPTH": _r(1, 1, checks=[ranks(in0=(4, 4)), same_dtype([0]), at_least("block_size", 1)],
                         shape=space_to_depth_shape),
    "SPACE_TO_BATCH_ND": _r(3, 1, checks=[ranks(in0=(3, 4)), index_dtype(1, 2), same_dtype([0])],
                            shape=space_to_batch_shape),
    "BATCH_TO_SPACE_ND": _r(3, 1, checks=[ranks(in0=(3, 4)), index_dtype(1, 2), same_dtype([0])],
                            shape=batch_to_space_shape),
    "BROADCAST_TO": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=broadcast_to_shape),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "REVERSE_V2": ((2, 2), (1, 1)),
    "MATRIX_DIAG": ((1, 1), (1, 1)),
    "MATRIX_SET_DIAG": ((2, 2), (1, 1)),
    "REVERSE_SEQUENCE": ((2, 2), (1, 1)),
}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {
    "RESIZE_BILINEAR": ("f32 i16 i8 u8", ""),
    "RESIZE_NEAREST_NEIGHBOR": ("b f16 f32 i16 i32 i8 u16 u32 u8", ""),
    "PAD": ("b f16 f32 i16 i32 i64 i8 u8", ""),
    "MIRROR_PAD": ("*", ""),
    "PADV2": ("b f16 f32 i16 i32 i64 i8 u8", ""),
    "CONCATENATION": ("b f16 f32 i16 i32 i64 i8 u32 u8", ""),
    "PACK": ("f32 i16 i32 i64 i8 u32 u8", ""),
    "UNPACK": ("b f16 f32 i16 i32 i8 u8", ""),
    "SPLIT": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "SPLIT_V": ("f32 i16 i32 i64 i8 u8", ""),
    "SLICE": ("*", ""),
    "STRIDED_SLICE": ("*", ""),
    "TILE": ("*", ""),
    "TRANSPOSE": ("*", ""),
    "RESHAPE": ("*", ""),
    "SQUEEZE": ("*", ""),
    "EXPAND_DIMS": ("*", ""),
    "DEPTH_TO_SPACE": ("f16 f32 i32 i64 i8 u8", ""),
    "SPACE_TO_DEPTH": ("f32 i32 i64 i8 u8", ""),
    "SPACE_TO_BATCH_ND": ("*", ""),
    "BATCH_TO_SPACE_ND": ("*", ""),
    "REVERSE_V2": ("b f16 f32 i16 i32 i64 i8 u8", ""),
}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {
    "RESHAPE": _reshape_own_shape,
}


# -- Rank and Dimension Propagation (model/symbolic.py) ---------------------------------------------------------------
OP_CLASSES: dict[str, int] = dict.fromkeys(
    ["RESHAPE", "EXPAND_DIMS", "TRANSPOSE", "SPLIT", "SPLIT_V", "SLICE", "STRIDED_SLICE", "TILE", "BROADCAST_TO", "PAD",
     "PADV2", "MIRROR_PAD", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"], 3)


def _strided_slice_values(v: OpView) -> list | None:
    """A 1-D shape vector sliced with constant begin / end / strides (shape[1:3], shape[-1] ...)."""
    values, begin, end, strides = v.ints(0), v.ints(1), v.ints(2), v.ints(3)
    if values is None or begin is None or end is None or strides is None or len(begin) != 1 or v.rank(0) != 1 \
            or v.opt("ellipsis_mask") or v.opt("new_axis_mask"):
        return None
    b, e, s = begin[0], end[0], strides[0]
    if v.opt("offset"):
        e = b + e
    if v.opt("shrink_axis_mask") & 1:
        return [values[b]]
    return values[slice(None if v.opt("begin_mask") & 1 else b, None if v.opt("end_mask") & 1 else e, s)]


def _slice_values(v: OpView) -> list | None:
    values, begin, size = v.ints(0), v.ints(1), v.ints(2)
    if values is None or begin is None or size is None or v.rank(0) != 1:
        return None
    return values[begin[0]:] if size[0] == -1 else values[begin[0]:begin[0] + size[0]]


def _pack_values(v: OpView) -> list | None:
    parts = [v.ints(i) for i in range(v.n_in)]
    if any(p is None or len(p) != 1 for p in parts) or int(v.opt("axis")) != 0:
        return None
    return [p[0] for p in parts]  # type: ignore[index]


def _concat_values(v: OpView) -> list | None:
    parts = [v.ints(i) for i in range(v.n_in)]
    if any(p is None for p in parts) or any(v.rank(i) != 1 for i in range(v.n_in)):
        return None
    return [d for p in parts for d in p]  # type: ignore[union-attr]


SYMBOLIC_VALUES: dict[str, Callable[[OpView], list | None]] = {
    "STRIDED_SLICE": _strided_slice_values, "SLICE": _slice_values, "PACK": _pack_values,
    "CONCATENATION": _concat_values, "RESHAPE": same_values, "SQUEEZE": same_values, "EXPAND_DIMS": same_values,
}


def _reshape_equations(v: OpView) -> list[tuple[Any, Any]]:
    """A reshape keeps the element count: backward, an output size found later gives the input's."""
    return [(dims_product(v.shape(0)), dims_product(v.out_shape()))]


def _concat_equations(v: OpView) -> list[tuple[Any, Any]]:
    shapes = [v.shape(i) for i in range(v.n_in)]
    out = v.out_shape()
    axis = v.axis(int(v.opt("axis")), len(out))
    eqs: list[tuple[Any, Any]] = [(sum(s[axis] for s in shapes), out[axis])]
    for s in shapes:
        eqs += [(a, b) for d, (a, b) in enumerate(zip(s, out)) if d != axis]
    return eqs


def _pack_equations(v: OpView) -> list[tuple[Any, Any]]:
    first = v.shape(0)
    return [(a, b) for i in range(1, v.n_in) for a, b in zip(first, v.shape(i))]


EQUATIONS: dict[str, Callable[[OpView], list[tuple[Any, Any]]]] = {
    "RESHAPE": _reshape_equations, "CONCATENATION": _concat_equations, "PACK": _pack_equations,
}


# -- constant folding -------------------------------------------------------------------------------------------------
def _fold_strided_slice(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    begin, end, strides = _ints(graph, op, 1), _ints(graph, op, 2), _ints(graph, op, 3)
    if op.opt("ellipsis_mask", 0) or op.opt("new_axis_mask", 0) or len(begin) > x.ndim or 0 in strides:
        raise NotImplementedError  # rare in shape chains: LiteRT evaluates it
    index, shrink = [], []
    for d in range(len(begin)):
        b, e, s = begin[d], end[d], strides[d]
        if op.opt("offset", False):
            e = b + e
        if op.opt("shrink_axis_mask", 0) >> d & 1:
            b = b + x.shape[d] if b < 0 else b
            index.append(slice(b, b + 1, 1))
            shrink.append(d)
            continue
        index.append(slice(None if op.opt("begin_mask", 0) >> d & 1 else b,
                           None if op.opt("end_mask", 0) >> d & 1 else e, s))
    out = x[tuple(index)]
    return [out.reshape([n for d, n in enumerate(out.shape) if d not in shrink])]


def _fold_slice(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    begin, size = _ints(graph, op, 1), _ints(graph, op, 2)
    return [x[tuple(slice(b, x.shape[d] if n < 0 else b + n) for d, (b, n) in enumerate(zip(begin, size)))]]


def _fold_out_shape(op: Op, graph: Graph) -> list[np.ndarray]:
    """RESHAPE / SQUEEZE / EXPAND_DIMS: the declared output shape is the answer (checked after)."""
    return [_val(graph, op, 0).reshape(graph.tensors[op.outputs[0]].shape)]


def _fold_concat(op: Op, graph: Graph) -> list[np.ndarray]:
    if op.opt("fused_activation_function", 0):
        raise NotImplementedError
    xs = [_val(graph, op, i) for i in range(len(op.inputs))]
    return [np.concatenate(xs, axis=_axis(op.opt("axis", 0), xs[0].ndim))]


def _fold_unpack(op: Op, graph: Graph) -> list[np.ndarray]:
    x = _val(graph, op, 0)
    return list(np.moveaxis(x, _axis(op.opt("axis", 0), x.ndim), 0))


FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {
    "STRIDED_SLICE": _fold_strided_slice,
    "SLICE": _fold_slice,
    "PACK": lambda op, g: [np.stack([_val(g, op, i) for i in range(len(op.inputs))],
                                    axis=_axis(op.opt("axis", 0), _val(g, op, 0).ndim + 1))],
    "UNPACK": _fold_unpack,
    "CONCATENATION": _fold_concat,
    "RESHAPE": _fold_out_shape,
    "SQUEEZE": _fold_out_shape,
    "EXPAND_DIMS": _fold_out_shape,
    "TRANSPOSE": lambda op, g: [np.transpose(_val(g, op, 0), _ints(g, op, 1))],
}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


@builtin("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
def _reshape(n: Node) -> list[np.ndarray]:
    return [n.x().reshape(n.out_shape())]


@builtin("TRANSPOSE")
def _transpose(n: Node) -> list[np.ndarray]:
    return [np.transpose(n.x(0), n.ints(1))]


@builtin("CONCATENATION")
def _concat(n: Node) -> list[np.ndarray]:
    """A fused activation is ignored, as LiteRT's float kernel does (its reference kernel refuses one)."""
    return [np.concatenate(n.args, axis=int(n.opt("axis", 0)))]  # type: ignore[arg-type]


@builtin("PACK")
def _pack(n: Node) -> list[np.ndarray]:
    return [np.stack(n.args, axis=int(n.opt("axis", 0)))]  # type: ignore[arg-type]


@builtin("UNPACK")
def _unpack(n: Node) -> list[np.ndarray]:
    return list(np.moveaxis(n.x(), int(n.opt("axis", 0)), 0))


@builtin("SPLIT")
def _split(n: Node) -> list[np.ndarray]:
    return np.split(n.x(1), len(n.op.outputs), axis=n.ints(0)[0])


@builtin("SPLIT_V")
def _split_v(n: Node) -> list[np.ndarray]:
    x, sizes, axis = n.x(0), n.ints(1), n.ints(2)[0]
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


@builtin("SLICE")
def _slice(n: Node) -> list[np.ndarray]:
    x, begin, size = n.x(0), n.ints(1), n.ints(2)
    return [x[tuple(slice(b, x.shape[d] if s < 0 else b + s) for d, (b, s) in enumerate(zip(begin, size)))]]


@builtin("STRIDED_SLICE")
def _strided_slice(n: Node) -> list[np.ndarray]:
    """TF's StridedSlice = numpy basic indexing: masks pick full ranges, new axes, an ellipsis or an index."""
    x, begin, end, strides = n.x(0), n.ints(1), n.ints(2), n.ints(3)
    masks = {k: int(n.opt(f"{k}_mask", 0)) for k in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")}
    index: list[Any] = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if masks["ellipsis"] & bit:
            index.append(Ellipsis)
        elif masks["new_axis"] & bit:
            index.append(np.newaxis)
        elif masks["shrink_axis"] & bit:
            index.append(b)
        else:
            if n.opt("offset", False):
                e = b + e
            index.append(slice(None if masks["begin"] & bit else b, None if masks["end"] & bit else e, s))
    return [x[tuple(index)]]


@builtin("TILE")
def _tile(n: Node) -> list[np.ndarray]:
    return [np.tile(n.x(0), n.ints(1))]


@builtin("BROADCAST_TO")
def _broadcast_to(n: Node) -> list[np.ndarray]:
    return [np.broadcast_to(n.x(0), n.ints(1)).copy()]


@builtin("PAD", "PADV2")
def _pad(n: Node) -> list[np.ndarray]:
    x = n.x(0)
    pads = np.asarray(n.x(1), np.int64).reshape(-1, 2)
    value = float(np.asarray(n.x(2)).reshape(-1)[0]) if n.op.code == "PADV2" and n.has(2) else 0.0
    return [np.pad(x, [tuple(p) for p in pads], constant_values=value)]


@builtin("MIRROR_PAD")
def _mirror_pad(n: Node) -> list[np.ndarray]:
    pads = [tuple(p) for p in np.asarray(n.x(1), np.int64).reshape(-1, 2)]
    return [np.pad(n.x(0), pads, mode="reflect" if int(n.opt("mode", 0)) == 0 else "symmetric")]


def _resize_scale(n_in: int, n_out: int, align_corners: bool) -> np.float32:
    if align_corners and n_out > 1:
        return np.float32(n_in - 1) / np.float32(n_out - 1)
    return np.float32(n_in) / np.float32(n_out)


@builtin("RESIZE_BILINEAR")
def _resize_bilinear(n: Node) -> list[np.ndarray]:
    """TFLite's ResizeBilinear: source coordinates in float32 as TFLite computes them, the blend in float64."""
    x = n.x(0)
    oh, ow = n.ints(1)
    ac, hp = bool(n.opt("align_corners", False)), bool(n.opt("half_pixel_centers", False))

    def coords(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scale = _resize_scale(n_in, n_out, ac)
        o = np.arange(n_out, dtype=np.float32)
        v = (o + np.float32(0.5)) * scale - np.float32(0.5) if hp else o * scale
        lo = np.maximum(np.floor(v).astype(np.int64), 0)
        hi = np.minimum(np.ceil(v).astype(np.int64), n_in - 1)
        return lo, hi, v.astype(F64) - lo
    y0, y1, dy = coords(x.shape[1], oh)
    x0, x1, dx = coords(x.shape[2], ow)
    dy, dx = dy[None, :, None, None], dx[None, None, :, None]
    top = x[:, y0][:, :, x0] * (1 - dx) + x[:, y0][:, :, x1] * dx
    bottom = x[:, y1][:, :, x0] * (1 - dx) + x[:, y1][:, :, x1] * dx
    return [top * (1 - dy) + bottom * dy]


@builtin("RESIZE_NEAREST_NEIGHBOR")
def _resize_nearest(n: Node) -> list[np.ndarray]:
    x = n.x(0)
    oh, ow = n.ints(1)
    ac, hp = bool(n.opt("align_corners", False)), bool(n.opt("half_pixel_centers", False))

    def source(n_in: int, n_out: int) -> np.ndarray:
        v = ((np.arange(n_out, dtype=np.float32) + np.float32(0.5 if hp else 0.0))
             * _resize_scale(n_in, n_out, ac)).astype(F64)
        idx = np.floor(v + 0.5) if ac else np.floor(v)  # std::round of v >= 0: half away from zero
        idx = np.minimum(idx.astype(np.int64), n_in - 1)
        return np.maximum(idx, 0) if hp else idx
    return [x[:, source(x.shape[1], oh)][:, :, source(x.shape[2], ow)]]


@builtin("SPACE_TO_DEPTH")
def _space_to_depth(n: Node) -> list[np.ndarray]:
    x, bs = n.x(), int(n.opt("block_size", 1))
    b, h, w, c = x.shape
    return [x.reshape(b, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h // bs, w // bs, -1)]


@builtin("DEPTH_TO_SPACE")
def _depth_to_space(n: Node) -> list[np.ndarray]:
    x, bs = n.x(), int(n.opt("block_size", 1))
    b, h, w, c = x.shape
    return [x.reshape(b, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5).reshape(b, h * bs, w * bs, -1)]


@builtin("SPACE_TO_BATCH_ND")
def _space_to_batch(n: Node) -> list[np.ndarray]:
    x, block = n.x(0), n.ints(1)
    m = len(block)
    pads = np.asarray(n.x(2), np.int64).reshape(m, 2)
    x = np.pad(x, [(0, 0), *[tuple(p) for p in pads], *[(0, 0)] * (x.ndim - 1 - m)])
    b, spatial, rest = x.shape[0], x.shape[1:1 + m], x.shape[1 + m:]
    split = [b]
    for s, k in zip(spatial, block):
        split += [s // k, k]
    x = x.reshape(*split, *rest)
    order = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, x.ndim))
    return [x.transpose(order).reshape(b * int(np.prod(block)), *[s // k for s, k in zip(spatial, block)], *rest)]


@builtin("BATCH_TO_SPACE_ND")
def _batch_to_space(n: Node) -> list[np.ndarray]:
    x, block = n.x(0), n.ints(1)
    m = len(block)
    crops = np.asarray(n.x(2), np.int64).reshape(m, 2)
    b = x.shape[0] // int(np.prod(block))
    spatial, rest = x.shape[1:1 + m], x.shape[1 + m:]
    x = x.reshape(*block, b, *spatial, *rest)
    order = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, x.ndim))
    x = x.transpose(order).reshape(b, *[s * k for s, k in zip(spatial, block)], *rest)
    return [x[(slice(None), *[slice(c0, x.shape[1 + i] - c1) for i, (c0, c1) in enumerate(crops)])]]
