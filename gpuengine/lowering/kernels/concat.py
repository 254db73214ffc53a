"""CONCATENATION (any axis, any number of inputs, constant inputs) and PACK.

Each output element picks its input by its coordinate along the axis. Along batch/rows/columns, or along
channels when every offset is a multiple of 4, whole vec4s are copied.
"""

from __future__ import annotations

from ...model.ir import Graph, Op
from .base import Lowering
from .index_map import Case, Ix, build_gather, check_data, norm_axis


def _range_cond(coord: Ix, lo: int, hi: int, size: int):
    """lo <= coord < hi, leaving out the bounds that always hold."""
    conds = ([coord >= lo] if lo > 0 else []) + ([coord < hi] if hi < size else [])
    if not conds:
        return None
    return conds[0] & conds[1] if len(conds) == 2 else conds[0]


class ConcatKernel:
    ops = ("CONCATENATION", "PACK")

    def _axis(self, op: Op, graph: Graph) -> int | None:
        rank = len(graph.tensors[op.outputs[0]].shape)
        return norm_axis(int(op.opt("axis", 0) or 0), rank)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if not op.inputs or len(op.outputs) != 1 or any(t < 0 for t in op.inputs):
            return "expects at least 1 input and 1 output"
        reason = check_data(op, graph, list(range(len(op.inputs))))
        if reason:
            return reason
        if int(op.opt("fused_activation_function", 0) or 0):
            # LiteRT's float CONCATENATION rejects fused activations (its XNNPACK path ignores them):
            # no single answer to match, so LiteRT decides.
            return "fused activation on CONCATENATION (LiteRT rejects or ignores it for float32)"
        out = graph.tensors[op.outputs[0]].shape
        axis = self._axis(op, graph)
        if axis is None:
            return f"axis {op.opt('axis', 0)} is out of range for rank {len(out)}"
        shapes = [graph.tensors[t].shape for t in op.inputs]
        if op.code == "PACK":
            expect = shapes[0][:axis] + (len(shapes),) + shapes[0][axis:]
            if any(s != shapes[0] for s in shapes) or expect != out:
                return f"cannot pack {shapes} along axis {axis} into {out}"
        else:
            rest = [s[:axis] + s[axis + 1:] for s in shapes]
            other = out[:axis] + out[axis + 1:]
            if any(len(s) != len(out) for s in shapes) or any(r != other for r in rest) \
                    or sum(s[axis] for s in shapes) != out[axis]:
                return f"cannot concatenate {shapes} along axis {axis} into {out}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        out_t = op.outputs[0]
        out = graph.tensors[out_t].shape
        axis = self._axis(op, graph) or 0
        pack = op.code == "PACK"
        sizes = [1 if pack else graph.tensors[t].shape[axis] for t in op.inputs]
        offsets = [sum(sizes[:k]) for k in range(len(sizes))]

        def mapping(o: list[Ix]) -> list[Case]:
            cases = []
            for k, (off, size) in enumerate(zip(offsets, sizes)):
                if size == 0:
                    continue
                cond = _range_cond(o[axis], off, off + size, out[axis])
                coords = o[:axis] + o[axis + 1:] if pack else o[:axis] + [o[axis] - off] + o[axis + 1:]
                cases.append(Case(k, coords, cond))
            return cases

        return build_gather(op, graph, out_t, list(op.inputs), mapping)


KERNEL = ConcatKernel()
