"""STABLEHLO_COMPOSITE ops replaced by their decomposition subgraph, inlined into the graph.

litert-torch writes attention (`odml.scaled_dot_product_attention`) and RMSNorm (`odml.rms_norm`) as composites
whose decomposition lives in a subgraph of its own. Inlined, the decomposition's ops go through the passes
(a LayerNorm/RMSNorm pattern is matched like any other), the GPU support check, fusion and memory planning like
the ops around them; a composite kept as one op could only run on LiteRT. Every composite is inlined, known by
name or not: its decomposition is its meaning, so an unknown composite never is an error. One that cannot be
inlined consistently (the decomposition's inputs or outputs disagree with the op's in count, shape or type; an
output that no op of the decomposition computes; variables) is left as it is and runs on LiteRT, which reads
the same subgraph.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ModelError
from ..model.ir import Graph, Model, Op

COMPOSITE = "STABLEHLO_COMPOSITE"
MAX_DEPTH = 16  # composites nested in decompositions; deeper (or a cycle the validator let through) is a ModelError


def inline_composites(graph: Graph, model: Model | None) -> Graph:
    """The graph with every composite whose decomposition fits its op inlined (nested ones too). Without the
    model (a graph compiled on its own) there is nothing to inline from."""
    if model is None or not any(op.code == COMPOSITE for op in graph.ops):
        return graph
    return _inline(graph, model, depth=0)


def _inline(graph: Graph, model: Model, depth: int) -> Graph:
    if depth > MAX_DEPTH:
        raise ModelError(f"STABLEHLO_COMPOSITE decompositions nested more than {MAX_DEPTH} deep (a cycle?)")
    out = graph.copy()
    ops: list[Op] = []
    changed = False
    for op in out.ops:
        sub = _decomposition(op, out, model)
        if sub is None:
            ops.append(op)
            continue
        sub = _inline(sub, model, depth + 1)  # composites inside the decomposition first
        ops.extend(_splice(out, op, sub))
        changed = True
    if not changed:
        return graph
    out.ops = ops
    return out


def _decomposition(op: Op, graph: Graph, model: Model) -> Graph | None:
    """The subgraph `op` can be replaced with, or None (not a composite, or one that does not fit: kept)."""
    if op.code != COMPOSITE:
        return None
    index = op.opt("decomposition_subgraph_index")
    if not isinstance(index, int) or not 0 <= index < len(model.subgraphs):
        return None
    sub = model.subgraphs[index]
    if len(sub.inputs) != len(op.inputs) or len(sub.outputs) != len(op.outputs) or -1 in op.inputs:
        return None
    for outer, inner in [*zip(op.inputs, sub.inputs), *zip(op.outputs, sub.outputs)]:
        a, b = graph.tensors[outer], sub.tensors[inner]
        if tuple(a.shape) != tuple(b.shape) or np.dtype(a.dtype) != np.dtype(b.dtype):
            return None
    produced = {t for o in sub.ops for t in o.outputs}
    if len(set(sub.outputs)) != len(sub.outputs) or any(t not in produced or t in sub.inputs for t in sub.outputs):
        return None  # an output passed straight through or read from a constant: no op to write it
    if any(t.is_variable for t in sub.tensors):
        return None
    return sub


def _splice(graph: Graph, op: Op, sub: Graph) -> list[Op]:
    """Append the decomposition's tensors to `graph` (its inputs and outputs become the composite's) and return
    its ops rewired to them, numbered as the composite (errors name the op of the file)."""
    remap = dict(zip(sub.inputs, op.inputs)) | dict(zip(sub.outputs, op.outputs))
    for tensor in sub.tensors:
        if tensor.index in remap:
            continue
        remap[tensor.index] = len(graph.tensors)
        graph.tensors.append(dataclasses.replace(tensor, index=len(graph.tensors)))
    return [dataclasses.replace(inner, index=op.index, inputs=[remap[t] if t >= 0 else -1 for t in inner.inputs],
                                outputs=[remap[t] for t in inner.outputs],
                                intermediates=[remap[t] for t in inner.intermediates if t >= 0])
            for inner in sub.ops]
