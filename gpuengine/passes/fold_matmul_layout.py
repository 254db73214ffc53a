"""Fold the RESHAPE / TRANSPOSE ops around a BATCH_MATMUL into its reads and writes (lowering/kernels/layout_view.py).

Multi-head attention as converters write it splits heads with RESHAPE [B, T, H*D] -> [B, T, H, D] and TRANSPOSE
[0, 2, 1, 3] before each matmul and merges them back after; in PHWC4 each of those is a copy dispatch that
writes and re-reads a whole tensor. Here a chain of such ops feeding a matmul operand (each intermediate read by
the next op alone) becomes the operand's view: the matmul reads the chain's input and maps coordinates itself.
A chain after the matmul (its output read by the chain alone, no graph output on the way) becomes its output
view: it writes the chain's last tensor directly. The fold happens only when the kernel accepts the result
(vec4 stores for an output view; kernel_support.check), so the op never lands where nothing could run it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..model.ir import Graph, Op
from ..model.ops import MATMUL_VIEWS as VIEW_OPTIONS
from ..model.ops import OUT_VIEW, VIEW_OPS
from ..model.ops import ViewStep as Step
from . import kernel_support
from .graph_utils import with_fields

MAX_STEPS = 4


def fold_matmul_layout(graph: Graph) -> Graph:
    graph = graph.copy()
    # Every matmul in order, on the graph as the folds before it left it, until a sweep folds nothing (starting over
    # after every fold instead made a 30-layer decoder's planning quadratic).
    changed = True
    while changed:
        changed = False
        maps = graph.producers(), graph.consumers()
        for op in list(graph.ops):  # a fold removes only RESHAPE / TRANSPOSE ops, never a matmul
            if op.code != "BATCH_MATMUL" or any(op.opt(k) for k in (*VIEW_OPTIONS, OUT_VIEW)):
                continue
            removed: list[Op] = []
            new = op
            for position in (0, 1):
                src, steps, chain = _chain_before(graph, new.inputs[position], *maps)
                if steps:
                    inputs = list(new.inputs)
                    inputs[position] = src
                    candidate = with_fields(new, inputs, **{VIEW_OPTIONS[position]: steps})
                    if kernel_support.check(candidate, graph) is None:
                        new, removed = candidate, removed + chain
            final, steps, chain = _chain_after(graph, new.outputs[0], maps[1])
            if steps:
                candidate = dataclasses.replace(with_fields(new, **{OUT_VIEW: steps}), outputs=[final])
                if kernel_support.check(candidate, graph) is None:
                    new, removed = candidate, removed + chain
            if new is not op:
                gone = {id(o) for o in removed}
                graph.ops = [o if o is not op else new for o in graph.ops if id(o) not in gone]
                changed = True
                maps = graph.producers(), graph.consumers()  # op indices moved
    return graph


def _step(graph: Graph, op: Op) -> Step | None:
    """The layout op as a Step, when it is a pure RESHAPE / TRANSPOSE of a float32 run-time tensor."""
    if op.code not in VIEW_OPS or len(op.outputs) != 1 or not op.inputs or op.inputs[0] < 0:
        return None
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if x.data is not None or x.dtype != np.float32 or out.dtype != np.float32 or x.quantization or out.quantization:
        return None
    if op.code == "TRANSPOSE":
        if len(op.inputs) < 2 or op.inputs[1] < 0 or graph.tensors[op.inputs[1]].data is None:
            return None
        perm = tuple(int(p) % max(1, len(x.shape)) for p in np.asarray(graph.tensors[op.inputs[1]].data).ravel())
        return Step("TRANSPOSE", tuple(x.shape), tuple(out.shape), perm)
    return Step("RESHAPE", tuple(x.shape), tuple(out.shape))


def _chain_before(graph: Graph, t: int, producers: dict[int, int], readers: dict[int, list[int]],
                  ) -> tuple[int, tuple[Step, ...], list[Op]]:
    """Walk up from operand t through layout ops whose outputs nothing else reads."""
    steps: list[Step] = []
    chain: list[Op] = []
    while len(steps) < MAX_STEPS and t in producers and t not in graph.outputs and len(readers.get(t, [])) == 1:
        op = graph.ops[producers[t]]
        step = _step(graph, op)
        if step is None:
            break
        steps.insert(0, step)
        chain.append(op)
        t = op.inputs[0]
    return t, tuple(steps), chain


def _chain_after(graph: Graph, t: int, readers: dict[int, list[int]]) -> tuple[int, tuple[Step, ...], list[Op]]:
    """Walk down from the matmul's output through layout ops that are the only reader of their input."""
    steps: list[Step] = []
    chain: list[Op] = []
    while len(steps) < MAX_STEPS and t not in graph.outputs and len(readers.get(t, [])) == 1:
        op = graph.ops[readers[t][0]]
        step = _step(graph, op)
        if step is None or op.inputs[0] != t:
            break
        steps.append(step)
        chain.append(op)
        t = op.outputs[0]
    return t, tuple(steps), chain
