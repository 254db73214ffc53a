"""Merge a tree of elementwise ops over one run-time tensor x into one ELEMENTWISE_TREE op, so that it runs in the
epilogue of x's producer (or, with no producer to host it, as one dispatch instead of one per op).

Epilogue fusion (fusion.py) takes an elementwise op only when its input is read by that op alone, and chains
grow one op at a time. An activation written as ops reads x more than once: swish MUL(x, LOGISTIC(x)),
hard-swish x * RELU6(x + 3) / 6, MUL(x, x), GELU's tanh form, so none of its ops could fuse and each became a
dispatch that writes and re-reads a full tensor. Merged, x has a single reader and fuses like any unary op.

A tree T qualifies when: its only run-time leaf is x, and only T reads x (x is no graph output); every tensor
T computes is read by T alone except its one result (the root, which may be a graph output); every constant
leaf is a scalar, per-channel or of x's shape (model/ops.py `leaf_kind`); every op produces x's shape;
and some tensor is read more than once inside T (a chain is left to epilogue fusion, which already takes it
with its per-op labels). T is the largest such set, and the merge happens only when the registry accepts the
merged op (which also keeps it off the CPU fallback, which could not run it).
"""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op, Options
from ..model.ops import ELEMENTWISE_TREE as TREE
from ..model.ops import TREE_OPTION, leaf_kind
from ..model.ops import ExpressionStep as Step
from . import kernel_support


def fuse_elementwise_tree(graph: Graph) -> Graph:
    graph = graph.copy()
    merged = True
    while merged:  # a merge changes readers and producers: look again from the start
        merged = False
        readers = graph.consumers()
        inline = {i for i, op in enumerate(graph.ops) if _inline(graph, op)}
        for x in _candidates(graph, readers, inline):
            tree = _largest_tree(graph, x, readers, inline)
            if tree is None:
                continue
            op = _merge(graph, x, tree)
            if kernel_support.check(op, graph) is not None:
                continue
            root_op = tree[-1]
            members = {id(o) for o in tree}
            graph.ops = [op if o is root_op else o for o in graph.ops if o is root_op or id(o) not in members]
            merged = True
            break
    return graph


def _inline(graph: Graph, op: Op) -> bool:
    """op can be a step of a tree: one output, evaluated inline, supported on the GPU."""
    return (len(op.outputs) == 1 and min(op.inputs, default=-1) >= 0 and kernel_support.expression_of(op) is not None
            and kernel_support.check(op, graph) is None)


def _candidates(graph: Graph, readers: dict[int, list[int]], inline: set[int]) -> list[int]:
    """Run-time rank-4 tensors, no graph output, read only by ops that can be inlined with their shape."""
    out = []
    for t, ops in readers.items():
        tensor = graph.tensors[t]
        if tensor.data is None and tensor.dtype == np.float32 and len(tensor.shape) == 4 and t not in graph.outputs \
                and all(i in inline and graph.tensors[graph.ops[i].outputs[0]].shape == tensor.shape
                        and graph.tensors[graph.ops[i].outputs[0]].dtype == np.float32 for i in ops):
            out.append(t)
    return out


def _largest_tree(graph: Graph, x: int, readers: dict[int, list[int]], inline: set[int]) -> list[Op] | None:
    """The largest qualifying tree over x, its ops in graph order (the root's op last), or None."""
    shape = graph.tensors[x].shape
    # The ops computable from x and constants alone (the candidates' members), found through readers from x.
    reachable: set[int] = set()
    frontier = [x]
    while frontier:
        for i in readers.get(frontier.pop(), []):
            op = graph.ops[i]
            if i not in reachable and i in inline and graph.tensors[op.outputs[0]].shape == shape:
                reachable.add(i)
                frontier.append(op.outputs[0])
    pure: list[int] = []
    computed = {x}
    for i in sorted(reachable):  # graph order is a topological order
        leaves = [t for t in graph.ops[i].inputs if t not in computed]
        if all(graph.tensors[t].data is not None and leaf_kind(graph, t, shape) is not None for t in leaves):
            pure.append(i)
            computed.add(graph.ops[i].outputs[0])
    if not set(readers[x]) <= set(pure):
        return None
    made_by = {graph.ops[i].outputs[0]: i for i in pure}
    best: list[int] | None = None
    for root_i in reversed(pure):
        members = _ancestors(graph, root_i, made_by)
        if (best is None or len(members) > len(best)) and _qualifies(graph, x, members, readers):
            best = members
    return None if best is None else [graph.ops[i] for i in best]


def _ancestors(graph: Graph, root_i: int, made_by: dict[int, int]) -> list[int]:
    """The op root_i and the ops among made_by it depends on, in graph order."""
    seen = {root_i}
    stack = [root_i]
    while stack:
        for t in graph.ops[stack.pop()].inputs:
            i = made_by.get(t)
            if i is not None and i not in seen:
                seen.add(i)
                stack.append(i)
    return sorted(seen)


def _qualifies(graph: Graph, x: int, members: list[int], readers: dict[int, list[int]]) -> bool:
    inside = set(members)
    if not set(readers[x]) <= inside:
        return False
    for i in members[:-1]:
        t = graph.ops[i].outputs[0]
        if t in graph.outputs or not set(readers.get(t, [])) <= inside:
            return False
    reads = [t for i in members for t in graph.ops[i].inputs if graph.tensors[t].data is None]
    return len(reads) > len(set(reads))  # some tensor is read twice: not a chain


def _merge(graph: Graph, x: int, tree: list[Op]) -> Op:
    """One op: inputs x, then the constant leaves; option `tree`: the Steps, in graph order."""
    inner = {op.outputs[0]: j for j, op in enumerate(tree)}
    constants = list(dict.fromkeys(t for op in tree for t in op.inputs if t != x and t not in inner))
    index = {x: 0, **{t: 1 + k for k, t in enumerate(constants)}}
    steps = tuple(Step(op, tuple(index[t] if t in index else -1 - inner[t] for t in op.inputs)) for op in tree)
    root = tree[-1]
    return Op(index=root.index, code=TREE, inputs=[x, *constants], outputs=[root.outputs[0]],
              options=Options("ElementwiseTreeOptions", {TREE_OPTION: steps}))
