"""Fold the copies in front of an ATTENTION op's operands into its layout views and scale.

litert-torch writes grouped-query attention over a KV cache as, per K and V: TRANSPOSE [B, T, N, H] -> [B, N, T, H],
RESHAPE to [N, 1, T, H], BROADCAST_TO [N, G, T, H] (each KV head repeated for its G query heads), RESHAPE to
[1, N*G, T, H], and for K and Q a MUL by a scalar (the softmax scale split as 1/sqrt(sqrt(H)) on each side). As
ops each is a copy of a whole cache per step (the BROADCAST_TO one G times larger). Here each becomes a step of the
operand's view (lowering/kernels/layout_view.py; BROADCAST_TO is a step reading index 0 on the repeated axis, so query
head h reads KV head h // G without a copy) and a scalar MUL of Q or K joins the op's `scale`. Runs after
fuse_attention; an op is changed only when the kernel accepts the result (kernel_support.check).
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op
from ..model.ops import ATTENTION, SCALE
from ..model.ops import ATTENTION_VIEWS as VIEWS
from ..model.ops import ViewStep as Step
from . import kernel_support
from .fold_matmul_layout import _step
from .graph_utils import with_fields


def fold_attention_operands(graph: Graph) -> Graph:
    graph = graph.copy()
    # Every ATTENTION in order, on the graph as the folds before it left it, until a sweep folds nothing (starting
    # over after every fold instead was quadratic in the layers).
    changed = True
    while changed:
        changed = False
        maps = graph.producers(), graph.consumers()
        for op in list(graph.ops):  # a fold removes only the copies in front of an operand, never an ATTENTION
            if op.code != ATTENTION:
                continue
            new, removed = op, []
            for position in (0, 1, 2):
                candidate, chain = _fold_operand(graph, new, position, *maps)
                if chain and kernel_support.check(candidate, graph) is None:
                    new, removed = candidate, removed + chain
            if new is not op:
                gone = {id(o) for o in removed}
                graph.ops = [new if o is op else o for o in graph.ops if id(o) not in gone]
                changed = True
                maps = graph.producers(), graph.consumers()  # op indices moved
    return graph


def _fold_operand(graph: Graph, op: Op, position: int, producers: dict[int, int], readers: dict[int, list[int]],
                  ) -> tuple[Op, list[Op]]:
    """The op reading operand `position` through the copies before it, and those copies (none: unchanged)."""
    t = op.inputs[position]
    steps: tuple[Step, ...] = tuple(op.opt(VIEWS[position]) or ())
    scale = float(op.opt(SCALE))
    chain: list[Op] = []
    while t in producers and t not in graph.outputs and len(readers.get(t, [])) == 1:
        prev = graph.ops[producers[t]]
        step = _step(graph, prev) or _broadcast_step(graph, prev)
        if step is not None:
            if len(step.in_shape) > 4 or len(step.out_shape) > 4:
                break
            steps = (step, *steps)
        else:
            factor = _scalar_factor(graph, prev, t) if position in (0, 1) else None
            if factor is None:
                break
            scale *= factor[1]
            chain.append(prev)
            t = factor[0]
            continue
        chain.append(prev)
        t = prev.inputs[0]
    if not chain:
        return op, []
    inputs = list(op.inputs)
    inputs[position] = t
    return with_fields(op, inputs, **{VIEWS[position]: steps, SCALE: scale}), chain


def _broadcast_step(graph: Graph, op: Op) -> Step | None:
    """A same-rank BROADCAST_TO of a float32 run-time tensor as a view step."""
    if op.code != "BROADCAST_TO" or len(op.outputs) != 1 or not op.inputs or op.inputs[0] < 0:
        return None
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    if x.data is not None or x.dtype != np.float32 or out.dtype != np.float32 or x.quantization or out.quantization:
        return None
    if len(x.shape) != len(out.shape) or any(i not in (1, o) for i, o in zip(x.shape, out.shape)):
        return None
    return Step("BROADCAST", tuple(x.shape), tuple(out.shape))


def _scalar_factor(graph: Graph, op: Op, t: int) -> tuple[int, float] | None:
    """(x, c) when `op` computes t = x * c for a finite scalar constant c (no activation), else None."""
    if op.code != "MUL" or len(op.inputs) != 2 or int(op.opt("fused_activation_function", 0) or 0) != 0:
        return None
    if graph.tensors[t].quantization is not None or graph.tensors[t].dtype != np.float32:
        return None
    for a, b in (op.inputs, op.inputs[::-1]):
        data = graph.tensors[b].data if b >= 0 else None
        if a >= 0 and data is not None and np.asarray(data).size == 1 and graph.tensors[a].data is None \
                and tuple(graph.tensors[a].shape) == tuple(graph.tensors[t].shape):
            c = float(np.asarray(data, np.float64).reshape(-1)[0])
            return (a, c) if np.isfinite(c) and c != 0 else None
    return None
