"""RESHAPE, SQUEEZE, EXPAND_DIMS: row-major reinterpretation of the element order.

The output tensor's static shape says everything (the flat element order never changes), so the shape/axis
inputs only need to be constants. Most
reshapes keep the PHWC4 bytes identical (same channels, same batch unless one slice, same B*H*W) and become a
free `Alias`; the rest gather through the row-major linear index.
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from ..layout import slices, to_bhwc
from .base import Alias, Lowering
from .index_map import Case, Ix, build_gather, check_data


def same_storage(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """True when a row-major reshape between shapes a and b leaves the PHWC4 storage unchanged."""
    ab, ah, aw, ac = to_bhwc(a)
    bb, bh, bw, bc = to_bhwc(b)
    return ac == bc and ab * ah * aw == bb * bh * bw and (ab == bb or slices(ac) == 1)


def _strides(shape: tuple[int, ...]) -> list[int]:
    return [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]


def reshape_map(in_shape: tuple[int, ...], out_shape: tuple[int, ...]):
    """Output coordinates -> row-major linear index -> input coordinates."""
    def mapping(o: list[Ix]) -> list[Case]:
        lin = Ix.const(0)
        for coord, st in zip(o, _strides(out_shape)):
            lin = lin + coord * st
        coords = [(lin // st) % dim if k else lin // st
                  for k, (st, dim) in enumerate(zip(_strides(in_shape), in_shape))]
        return [Case(0, coords)]
    return mapping


class ReshapeKernel:
    ops = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if not op.inputs or len(op.outputs) != 1:
            return "expects a data input and 1 output"
        reason = check_data(op, graph, [0])
        if reason:
            return reason
        src, dst = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if src.size != dst.size:
            return f"element counts differ: {src.shape} -> {dst.shape}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        src_t, out_t = op.inputs[0], op.outputs[0]
        in_shape, out_shape = graph.tensors[src_t].shape, graph.tensors[out_t].shape
        if graph.tensors[src_t].data is None and same_storage(in_shape, out_shape):
            return [Alias(out_t, src_t)]
        return build_gather(op, graph, out_t, [src_t], reshape_map(in_shape, out_shape))


KERNEL = ReshapeKernel()
