"""TILE with constant multiples: output[o] = input[o mod input shape]; BROADCAST_TO to a constant shape (numpy
rules: the input right-aligned, its unit axes repeated)."""

from __future__ import annotations

from ...model.ir import Graph, Op
from .base import Lowering
from .index_map import Case, Ix, build_gather, check_data, const_ints


class TileKernel:
    ops = ("TILE", "BROADCAST_TO")

    def supports(self, op: Op, graph: Graph) -> str | None:
        if op.code == "BROADCAST_TO":
            return _broadcast_reason(op, graph)
        if len(op.inputs) != 2 or len(op.outputs) != 1:
            return "expects 2 inputs (data, multiples) and 1 output"
        reason = check_data(op, graph, [0])
        if reason:
            return reason
        shape = graph.tensors[op.inputs[0]].shape
        mult = const_ints(graph, op.inputs[1])
        if mult is None or len(mult) != len(shape) or min(mult, default=1) < 1:
            return f"multiples {mult} do not fit the rank {len(shape)} input"
        out = tuple(d * m for d, m in zip(shape, mult))
        if out != graph.tensors[op.outputs[0]].shape:
            return f"output shape {graph.tensors[op.outputs[0]].shape} is not {shape} tiled by {mult}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        shape = graph.tensors[op.inputs[0]].shape
        if op.code == "BROADCAST_TO":
            lead = len(graph.tensors[op.outputs[0]].shape) - len(shape)

            def broadcast(o: list[Ix]) -> list[Case]:
                return [Case(0, [o[lead + i] if d > 1 else Ix.const(0) for i, d in enumerate(shape)])]

            return build_gather(op, graph, op.outputs[0], [op.inputs[0]], broadcast)
        mult = const_ints(graph, op.inputs[1]) or []

        def mapping(o: list[Ix]) -> list[Case]:
            return [Case(0, [coord if m == 1 else coord % dim for coord, dim, m in zip(o, shape, mult)])]

        return build_gather(op, graph, op.outputs[0], [op.inputs[0]], mapping)


KERNEL = TileKernel()


def _broadcast_reason(op: Op, graph: Graph) -> str | None:
    if len(op.inputs) != 2 or len(op.outputs) != 1:
        return "expects 2 inputs (data, shape) and 1 output"
    reason = check_data(op, graph, [0])
    if reason:
        return reason
    shape, out = graph.tensors[op.inputs[0]].shape, graph.tensors[op.outputs[0]].shape
    target = const_ints(graph, op.inputs[1])
    if target is None or tuple(target) != tuple(out):
        return f"shape {target} is not a constant equal to the output shape {out}"
    lead = len(out) - len(shape)
    if lead < 0 or any(d not in (1, out[lead + i]) for i, d in enumerate(shape)):
        return f"{shape} does not broadcast to {out}"
    return None
