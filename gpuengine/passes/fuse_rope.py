"""Fuse the rotary embedding as litert-torch writes it into one ROPE op (lowering/kernels/rope.py).

Pattern over x [..., 2H]: x1 = SLICE(x, last axis [0, H)), x2 = SLICE(x, last axis [H, 2H)),
lo = SUB(MUL(x1, cos), MUL(x2, sin)), hi = ADD(MUL(x2, cos), MUL(x1, sin)) (either order of each MUL's and the ADD's
operands), out = CONCATENATION([lo, hi], last axis); every intermediate read by the pattern alone. x itself is then
read through a layout view: the RESHAPE / SLICE / TRANSPOSE ops in front of it (the split of a fused QKV
projection's output into heads and into q, k and v) become steps of `view_x`, so the ROPE reads the projection's
output where it lies; those ops go when nothing else reads them. Runs before the elementwise fusions, which would
otherwise merge the MULs into SUB and ADD one by one.

An RMS_NORM over the last axis in that chain (Gemma 3's and Qwen 3's query / key norms: QKV split, RMS_NORM per
head, RESHAPE, rotation) joins the ROPE as its row-norm inputs (scale, offset, epsilon), when the layout ops after
it keep its rows whole and the ROPE chain is its only reader: the view then reaches through it to the projection's
output, and the norm's dispatch and the split's copies go. Otherwise the norm stays a dispatch of its own.
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op, Options
from ..model.ops import EPS_OUTSIDE, EPSILON, RMS_NORM, ROPE, VIEW_X
from ..model.ops import ViewStep as Step
from . import kernel_support
from .fold_matmul_layout import _step
from .graph_utils import new_const

MAX_STEPS = 6


def fuse_rope(graph: Graph) -> Graph:
    graph = graph.copy()
    changed, fused_any = True, False
    while changed:  # until a sweep fuses nothing (each sweep fuses every match it meets: two per layer)
        changed = False
        maps = _Maps(graph)
        for cat in list(graph.ops):  # a fusion removes SLICE / MUL / SUB / ADD / RMS_NORM ops, never a CONCATENATION
            tensors_before = len(graph.tensors)
            found = _match(graph, cat, maps)
            if found is not None and kernel_support.check(found[0], graph) is not None and len(found[0].inputs) == 6:
                del graph.tensors[tensors_before:]  # the norm's epsilon constant
                found = _match(graph, cat, maps, with_norm=False)  # the ROPE with the norm refused: keep the norm apart
            if found is None or kernel_support.check(found[0], graph) is not None:
                continue
            fused, members = found
            gone = {id(m) for m in members}
            graph.ops = [fused if o is cat else o for o in graph.ops if id(o) not in gone]
            changed = fused_any = True
            maps = _Maps(graph)  # op indices moved
    return drop_unread_views(graph) if fused_any else graph


def drop_unread_views(graph: Graph) -> Graph:
    """Remove RESHAPE / TRANSPOSE / SLICE ops whose outputs nothing reads (a view took their place)."""
    while True:
        readers = graph.consumers()
        dead = [o for o in graph.ops if o.code in ("RESHAPE", "TRANSPOSE", "SLICE")
                and not any(readers.get(t) or t in graph.outputs for t in o.outputs)]
        if not dead:
            return graph
        graph.ops = [o for o in graph.ops if all(o is not d for d in dead)]


class _Maps:
    """Producers, readers and positions of a graph's ops, computed once per state of the graph (not once per
    candidate: that made the pass quadratic in the layers)."""

    def __init__(self, graph: Graph) -> None:
        self.producers, self.readers = graph.producers(), graph.consumers()
        self.position = {id(o): i for i, o in enumerate(graph.ops)}


def _match(graph: Graph, cat: Op, maps: _Maps, with_norm: bool = True) -> tuple[Op, list[Op]] | None:
    if cat.code != "CONCATENATION" or len(cat.inputs) != 2 or len(cat.outputs) != 1:
        return None
    out = graph.tensors[cat.outputs[0]]
    rank = len(out.shape)
    if rank == 0 or int(cat.opt("axis", 0)) % rank != rank - 1 or int(cat.opt("fused_activation_function", 0) or 0):
        return None
    producers, readers = maps.producers, maps.readers

    def made(t: int, code: str) -> Op | None:
        if t < 0 or t not in producers or t in graph.outputs or len(readers.get(t, [])) != 1:
            return None
        op = graph.ops[producers[t]]
        plain = int(op.opt("fused_activation_function", 0) or 0) == 0
        return op if op.code == code and plain and graph.tensors[t].dtype == np.float32 else None

    lo, hi = made(cat.inputs[0], "SUB"), made(cat.inputs[1], "ADD")
    if lo is None or hi is None:
        return None
    a, b = (made(t, "MUL") for t in lo.inputs)
    c, d = (made(t, "MUL") for t in hi.inputs)
    if None in (a, b, c, d):
        return None
    # lo = x1 cos - x2 sin; hi = x2 cos + x1 sin (hi's terms in either order)
    for first, second in ((c, d), (d, c)):
        found = _halves(graph, a, b, first, second, maps)
        if found is not None:
            x, cos, sin, members = found
            break
    else:
        return None
    members = [*members, a, b, c, d, lo, hi]
    steps, src = _view_chain(graph, x, maps.producers)
    inputs = [src, cos, sin]
    norm = _row_norm(graph, src, steps, x, members, maps) if with_norm else None
    if norm is not None:
        norm_op, before = norm
        steps, src = (*before[0], *steps), before[1]
        eps = new_const(graph, norm_op.inputs[1], np.array([float(norm_op.opt(EPSILON))], np.float32),
                        f"{graph.tensors[norm_op.outputs[0]].name}/epsilon")
        inputs = [src, cos, sin, norm_op.inputs[1], norm_op.inputs[2], eps]
        members.append(norm_op)
    fused = Op(index=cat.index, code=ROPE, inputs=inputs, outputs=list(cat.outputs),
               options=Options("RopeOptions", {VIEW_X: steps or None}))
    return fused, members


def _row_norm(graph: Graph, t: int, after: tuple[Step, ...], x: int, members: list[Op],
              maps: _Maps) -> tuple[Op, tuple] | None:
    """The RMS_NORM producing t and the view chain in front of it, when it can join the ROPE: the steps `after` it
    (from t to x) keep its rows (last axis) whole, and nothing but this chain and the rotation reads t, x or any
    tensor between them."""
    producers, readers = maps.producers, maps.readers
    if t not in producers or t in graph.outputs:
        return None
    op = graph.ops[producers[t]]
    if op.code != RMS_NORM or op.opt(EPS_OUTSIDE) or len(op.inputs) != 3 or not isinstance(op.opt(EPSILON), float):
        return None
    width = graph.tensors[t].shape[-1]
    for step in after:
        if step.in_shape[-1] != width or step.out_shape[-1] != width:
            return None
        if step.kind == "TRANSPOSE" and step.perm[-1] != len(step.perm) - 1:
            return None
        if step.kind == "SLICE" and step.perm[-1] != 0:
            return None
    current = t
    while current != x:  # every tensor of the chain read only by the next op of the chain
        own = readers.get(current, [])
        if len(own) != 1 or current in graph.outputs:
            return None
        current = graph.ops[own[0]].outputs[0]
    if x in graph.outputs or not set(readers.get(x, [])) <= {maps.position[id(o)] for o in members}:
        return None
    before = _view_chain(graph, op.inputs[0], producers)
    if len(before[0]) + len(after) > MAX_STEPS:
        return None
    return op, before


def _halves(graph: Graph, a: Op, b: Op, c: Op, d: Op, maps: _Maps) -> tuple[int, int, int, list[Op]] | None:
    """x, cos, sin and the two SLICEs when a = x1*cos, b = x2*sin, c = x2*cos, d = x1*sin (operands either way)."""
    producers, readers, position = maps.producers, maps.readers, maps.position
    for x1, cos in (a.inputs, a.inputs[::-1]):
        for x2, sin in (b.inputs, b.inputs[::-1]):
            if set(c.inputs) != {x2, cos} or set(d.inputs) != {x1, sin} or x1 == x2 or cos == sin:
                continue
            if x1 not in producers or x2 not in producers or x1 in graph.outputs or x2 in graph.outputs:
                continue
            s1, s2 = graph.ops[producers[x1]], graph.ops[producers[x2]]
            if sorted(readers.get(x1, [])) != sorted(position[id(o)] for o in (a, d)) or \
                    sorted(readers.get(x2, [])) != sorted(position[id(o)] for o in (b, c)):
                continue
            x = _halves_of(graph, s1, s2)
            if x is not None and graph.tensors[cos].dtype == np.float32 and graph.tensors[sin].dtype == np.float32:
                return x, cos, sin, [s1, s2]
    return None


def _halves_of(graph: Graph, s1: Op, s2: Op) -> int | None:
    """x when s1 and s2 are SLICEs of x taking the first and the second half of its last axis, all of the rest."""
    if s1.code != "SLICE" or s2.code != "SLICE" or s1.inputs[0] != s2.inputs[0]:
        return None
    x = s1.inputs[0]
    shape = tuple(graph.tensors[x].shape)
    if not shape or shape[-1] % 2 or graph.tensors[x].dtype != np.float32 or graph.tensors[x].data is not None:
        return None
    half = shape[-1] // 2
    for op, first in ((s1, 0), (s2, half)):
        begin = graph.tensors[op.inputs[1]].data if op.inputs[1] >= 0 else None
        if begin is None or tuple(graph.tensors[op.outputs[0]].shape) != (*shape[:-1], half):
            return None
        if [int(v) for v in np.asarray(begin).ravel()] != [0] * (len(shape) - 1) + [first]:
            return None
    return x


def _view_chain(graph: Graph, t: int, producers: dict[int, int]) -> tuple[tuple[Step, ...], int]:
    """Steps from the tensor the layout ops in front of t read, to t (RESHAPE, TRANSPOSE, SLICE with constant
    begin and size), and that tensor."""
    steps: list[Step] = []
    while len(steps) < MAX_STEPS and t in producers:
        op = graph.ops[producers[t]]
        step = _step(graph, op) or _slice_step(graph, op)
        if step is None or len(step.in_shape) > 4 or len(step.out_shape) > 4:
            break
        steps.insert(0, step)
        t = op.inputs[0]
    return tuple(steps), t


def _slice_step(graph: Graph, op: Op) -> Step | None:
    if op.code != "SLICE" or len(op.inputs) != 3 or min(op.inputs) < 0:
        return None
    x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
    begin = graph.tensors[op.inputs[1]].data
    if begin is None or x.data is not None or x.dtype != np.float32 or x.quantization or out.quantization:
        return None
    begin = tuple(int(v) for v in np.asarray(begin).ravel())
    if len(begin) != len(x.shape):
        return None
    return Step("SLICE", tuple(x.shape), tuple(out.shape), begin)
