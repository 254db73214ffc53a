"""SLICE and STRIDED_SLICE with constant begin/end/size/strides: input[start + stride * o] per kept axis.

STRIDED_SLICE follows TFLite: masks, negative indices and strides, shrink axes, one ellipsis and new axes.
The computed output shape must equal the tensor's static shape, otherwise the op is left to the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model.ir import Graph, Op
from .base import Lowering
from .index_map import Case, Ix, build_gather, check_data, const_ints


@dataclass
class Plan:
    """Per input axis: first index, step and whether the output keeps it; the output's axes in order
    (an input axis, or None for a new size-1 axis); the output shape this produces."""

    start: list[int]
    step: list[int]
    keep: list[bool]
    out_axes: list[int | None]
    shape: tuple[int, ...]


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def slice_plan(shape: tuple[int, ...], begin: list[int], size: list[int]) -> Plan | str:
    if len(begin) != len(shape) or len(size) != len(shape):
        return f"begin {begin} / size {size} do not match the rank {len(shape)} input"
    out = []
    for b, s, d in zip(begin, size, shape):
        s = d - b if s == -1 else s
        if b < 0 or s < 0 or b + s > d:
            return f"slice begin {begin} size {size} is out of range for {shape}"
        out.append(s)
    rank = len(shape)
    return Plan(list(begin), [1] * rank, [True] * rank, list(range(rank)), tuple(out))


def strided_plan(shape: tuple[int, ...], begin: list[int], end: list[int], strides: list[int],
                 begin_mask: int, end_mask: int, ellipsis_mask: int, new_axis_mask: int,
                 shrink_mask: int, offset: bool = False) -> Plan | str:
    n, rank = len(begin), len(shape)
    if len(end) != n or len(strides) != n:
        return "begin, end and strides differ in length"
    if bin(ellipsis_mask & ((1 << n) - 1)).count("1") > 1:
        return "more than one ellipsis"
    if 0 in strides:
        return "a stride is 0"
    # Dense spec: one entry per input axis (begin, end, stride, begin masked, end masked, shrink).
    dense: list[tuple[int, int, int, bool, bool, bool]] = []
    out_axes: list[int | None] = []
    ellipsis = False

    def full() -> None:
        out_axes.append(len(dense))
        dense.append((0, 0, 1, True, True, False))

    for i in range(n):
        bit = 1 << i
        if ellipsis_mask & bit:
            ellipsis = True
            later = range(i + 1, n)
            new_after = sum(1 for j in later if (new_axis_mask >> j) & 1 and not (ellipsis_mask >> j) & 1)
            stop = min(rank - (n - i) + 1 + new_after, rank)
            while len(dense) < stop:
                full()
        elif new_axis_mask & bit:
            out_axes.append(None)
        else:
            if len(dense) >= rank:
                return f"the slice spec has more axes than the rank {rank} input"
            shrink = bool(shrink_mask & bit)
            if not shrink:
                out_axes.append(len(dense))
            dense.append((begin[i], end[i], strides[i], bool(begin_mask & bit), bool(end_mask & bit), shrink))
    if not ellipsis:
        while len(dense) < rank:
            full()
    if len(dense) != rank:
        return f"the slice spec covers {len(dense)} axes of a rank {rank} input"
    start, step, keep, sizes = [], [], [], []
    for (b, e, s, bm, em, shrink), d in zip(dense, shape):
        if shrink:
            if s < 0:
                return "a shrunk axis with a negative stride"  # LiteRT leaves such outputs uninitialized
            b = 0 if bm else (b + d if b < 0 else b)  # LiteRT applies begin_mask even to shrunk axes
            if not 0 <= b < d:
                return f"shrink index {b} is out of range for a dimension of {d}"
            start.append(b)
            step.append(1)
            keep.append(False)
            continue
        if offset:
            e = b + e  # `offset`: end is relative to begin (begin >= 0 checked by the caller)
        b = b + d if b < 0 else b
        b = _clamp(b, 0, d) if s > 0 else _clamp(b, -1, d - 1)
        if bm:
            b = 0 if s > 0 else d - 1
        e = e + d if e < 0 else e
        e = _clamp(e, 0, d) if s > 0 else _clamp(e, -1, d - 1)
        if em:
            e = d if s > 0 else -1
        count = max(0, -(-(e - b) // s))
        start.append(b)
        step.append(s)
        keep.append(True)
        sizes.append(count)
    dims = iter(sizes)
    out_shape = tuple(1 if a is None else next(dims) for a in out_axes)
    return Plan(start, step, keep, out_axes, out_shape)


def _plan(op: Op, graph: Graph) -> Plan | str:
    shape = graph.tensors[op.inputs[0]].shape
    if op.code == "SLICE":
        if len(op.inputs) != 3:
            return "expects 3 inputs (data, begin, size)"
        begin, size = const_ints(graph, op.inputs[1]), const_ints(graph, op.inputs[2])
        if begin is None or size is None:
            return "begin and size must be constants"
        return slice_plan(shape, begin, size)
    if len(op.inputs) != 4:
        return "expects 4 inputs (data, begin, end, strides)"
    begin, end, strides = (const_ints(graph, t) for t in op.inputs[1:])
    if begin is None or end is None or strides is None:
        return "begin, end and strides must be constants"
    offset = bool(op.opt("offset", False))
    if offset and min(begin, default=0) < 0:
        return "offset with a negative begin is not supported"
    return strided_plan(shape, begin, end, strides, *(int(op.opt(k, 0) or 0) for k in (
        "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")), offset=offset)


class SliceKernel:
    ops = ("SLICE", "STRIDED_SLICE")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if not op.inputs or len(op.outputs) != 1:
            return "expects a data input and 1 output"
        reason = check_data(op, graph, [0])
        if reason:
            return reason
        plan = _plan(op, graph)
        if isinstance(plan, str):
            return plan
        out = graph.tensors[op.outputs[0]].shape
        if plan.shape != out:
            return f"the slice gives shape {plan.shape}, but the output tensor is {out}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        plan = _plan(op, graph)
        assert not isinstance(plan, str), plan
        where = {a: k for k, a in enumerate(plan.out_axes) if a is not None}

        def mapping(o: list[Ix]) -> list[Case]:
            coords = []
            for axis, (b, s, kept) in enumerate(zip(plan.start, plan.step, plan.keep)):
                if not kept:
                    coords.append(Ix.const(b))
                elif s > 0:
                    coords.append(o[where[axis]] * s + b)
                else:
                    coords.append(Ix.const(b) - o[where[axis]] * (-s))
            return [Case(0, coords)]

        return build_gather(op, graph, op.outputs[0], [op.inputs[0]], mapping)


KERNEL = SliceKernel()
