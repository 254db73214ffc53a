"""TRANSPOSE with a constant permutation (rank 1-4): output[o] = input[o permuted back].

Permutations that keep the last axis in place copy whole vec4s (index_map detects it).
"""

from __future__ import annotations

from ...model.ir import Graph, Op
from .base import Lowering
from .index_map import Case, Ix, build_gather, check_data, const_ints


class TransposeKernel:
    ops = ("TRANSPOSE",)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 2 or len(op.outputs) != 1:
            return "expects 2 inputs (data, perm) and 1 output"
        reason = check_data(op, graph, [0])
        if reason:
            return reason
        perm = const_ints(graph, op.inputs[1])
        shape = graph.tensors[op.inputs[0]].shape
        if perm is None or sorted(perm) != list(range(len(shape))):
            return f"perm {perm} is not a permutation of the {len(shape)} input axes"
        out = tuple(shape[p] for p in perm)
        if out != graph.tensors[op.outputs[0]].shape:
            return f"output shape {graph.tensors[op.outputs[0]].shape} is not the permuted input shape {out}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        perm = const_ints(graph, op.inputs[1]) or []

        def mapping(o: list[Ix]) -> list[Case]:
            return [Case(0, [o[perm.index(axis)] for axis in range(len(perm))])]

        return build_gather(op, graph, op.outputs[0], [op.inputs[0]], mapping)


KERNEL = TransposeKernel()
