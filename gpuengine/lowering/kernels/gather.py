"""GATHER: output = params[..., indices[...], ...] along `axis`.

Constant indices (batch_dims 0): the indices are bound once as a u32 table; each output element looks its source
index up in it (whole vec4s move where the map allows). Run-time int32 indices (token ids) and batch_dims != 0:
kernels/dynamic_index.py reads each index on the GPU, clamped into the axis so no read leaves the buffer (an id
out of range from the host raises LiteRT's error first, runtime/bounds.py).
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from .base import Lowering
from .dynamic_index import build_gather as build_runtime_gather
from .dynamic_index import gather_support
from .index_map import Case, Ix, build_gather, check_data, lookup, norm_axis


def _axis_of(op: Op, graph: Graph) -> int:
    axis, rank = int(op.opt("axis", 0) or 0), len(graph.tensors[op.inputs[0]].shape)
    return axis + rank if axis < 0 else axis


class GatherKernel:
    ops = ("GATHER",)

    def _axis(self, op: Op, graph: Graph) -> int | None:
        return norm_axis(int(op.opt("axis", 0) or 0), len(graph.tensors[op.inputs[0]].shape))

    def _runtime(self, op: Op, graph: Graph) -> bool:
        """Indices read on the GPU: run-time indices, or constant ones with batch_dims."""
        return graph.tensors[op.inputs[1]].data is None or int(op.opt("batch_dims", 0) or 0) != 0

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
            return "expects 2 inputs (params, indices) and 1 output"
        if self._runtime(op, graph):
            reason = gather_support(op, graph)
            indices = graph.tensors[op.inputs[1]].data
            if reason is None and indices is not None:
                axis_size = graph.tensors[op.inputs[0]].shape[_axis_of(op, graph)]
                if np.size(indices) and (np.min(indices) < 0 or np.max(indices) >= axis_size):
                    return f"indices outside [0, {axis_size})"
            return reason
        reason = check_data(op, graph, [0])
        if reason:
            return reason
        shape = graph.tensors[op.inputs[0]].shape
        axis = self._axis(op, graph)
        if axis is None:
            return f"axis {op.opt('axis', 0)} is out of range for rank {len(shape)}"
        indices = np.asarray(graph.tensors[op.inputs[1]].data)
        if indices.size and (indices.min() < 0 or indices.max() >= shape[axis]):
            return f"indices outside [0, {shape[axis]})"
        out = shape[:axis] + indices.shape + shape[axis + 1:]
        if out != graph.tensors[op.outputs[0]].shape:
            return f"output shape {graph.tensors[op.outputs[0]].shape} is not {out}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        if self._runtime(op, graph):
            return build_runtime_gather(op, graph)
        axis = self._axis(op, graph) or 0
        indices = np.asarray(graph.tensors[op.inputs[1]].data).astype(np.int64)
        table = indices.reshape(-1).astype(np.uint32)
        q = indices.ndim
        strides = [int(np.prod(indices.shape[k + 1:], dtype=np.int64)) for k in range(q)]

        def mapping(o: list[Ix]) -> list[Case]:
            flat = Ix.const(0)
            for coord, st in zip(o[axis:axis + q], strides):
                flat = flat + coord * st
            return [Case(0, o[:axis] + [lookup("indices", table, flat)] + o[axis + q:])]

        return build_gather(op, graph, op.outputs[0], [op.inputs[0]], mapping, tables={"indices": table})


KERNEL = GatherKernel()
