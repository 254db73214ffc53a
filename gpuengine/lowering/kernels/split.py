"""SPLIT, SPLIT_V and UNPACK: one gather dispatch (or a free Alias) per output.

Output sizes along the axis are read from the output tensors' static shapes and checked against the
num_splits / size_splits / num options.
"""

from __future__ import annotations

from ...model.ir import Graph, Op
from .base import Lowering
from .index_map import Case, Ix, build_gather, check_data, const_ints, norm_axis


class SplitKernel:
    ops = ("SPLIT", "SPLIT_V", "UNPACK")

    def _parts(self, op: Op, graph: Graph) -> tuple[int, int, str | None]:
        """(data input index, axis, reason or None)."""
        if op.code == "SPLIT":
            if len(op.inputs) != 2:
                return 1, 0, "expects 2 inputs (axis, data)"
            data, axes = 1, const_ints(graph, op.inputs[0])
        elif op.code == "SPLIT_V":
            if len(op.inputs) != 3:
                return 0, 0, "expects 3 inputs (data, size_splits, axis)"
            data, axes = 0, const_ints(graph, op.inputs[2])
        else:
            if len(op.inputs) != 1:
                return 0, 0, "expects 1 input"
            data, axes = 0, [int(op.opt("axis", 0) or 0)]
        if axes is None or len(axes) != 1:
            return data, 0, "the axis must be one constant"
        rank = len(graph.tensors[op.inputs[data]].shape)
        axis = norm_axis(axes[0], rank)
        if axis is None:
            return data, 0, f"axis {axes[0]} is out of range for rank {rank}"
        return data, axis, None

    def supports(self, op: Op, graph: Graph) -> str | None:
        data, axis, reason = self._parts(op, graph)
        if reason:
            return reason
        reason = check_data(op, graph, [data])
        if reason:
            return reason
        shape = graph.tensors[op.inputs[data]].shape
        outs = [graph.tensors[t].shape for t in op.outputs]
        if op.code == "UNPACK":
            want = shape[:axis] + shape[axis + 1:]
            if len(outs) != shape[axis] or any(s != want for s in outs):
                return f"cannot unpack {shape} along axis {axis} into {outs}"
            return None
        rest = shape[:axis] + shape[axis + 1:]
        if any(len(s) != len(shape) or s[:axis] + s[axis + 1:] != rest for s in outs) \
                or sum(s[axis] for s in outs) != shape[axis]:
            return f"cannot split {shape} along axis {axis} into {outs}"
        if op.code == "SPLIT":
            n = int(op.opt("num_splits", len(outs)) or len(outs))
            if n != len(outs) or shape[axis] % n or any(s[axis] != shape[axis] // n for s in outs):
                return f"num_splits {n} does not split {shape} evenly along axis {axis} into {outs}"
        else:
            sizes = const_ints(graph, op.inputs[1]) or []
            if len(sizes) != len(outs) or sizes.count(-1) > 1 or any(
                    s != -1 and s != o[axis] for s, o in zip(sizes, outs)):
                return f"size_splits {sizes} do not match the outputs {outs}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        data, axis, _ = self._parts(op, graph)
        src = op.inputs[data]
        lowering: Lowering = []
        offset = 0
        for k, out_t in enumerate(op.outputs):
            if op.code == "UNPACK":
                def mapping(o: list[Ix], k: int = k) -> list[Case]:
                    return [Case(0, o[:axis] + [Ix.const(k)] + o[axis:])]
            else:
                def mapping(o: list[Ix], off: int = offset) -> list[Case]:
                    return [Case(0, o[:axis] + [o[axis] + off] + o[axis + 1:])]
                offset += graph.tensors[out_t].shape[axis]
            lowering += build_gather(op, graph, out_t, [src], mapping)
        return lowering


KERNEL = SplitKernel()
