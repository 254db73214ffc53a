"""Fold a tree of elementwise ops into the op that reads its result, as an input prologue
(lowering/kernels/prologue.py): the consumer's kernel evaluates the tree while loading its input.

Only trees that epilogue fusion cannot take: none of the tree's run-time leaves of the result's shape is read
by the tree alone (each is materialized anyway for its other readers), e.g. the residual ADD of two tensors
read elsewhere too, or a squeeze-excitation MUL(x, gate(x)) (+ ADD) before a 1x1 conv. An epilogue costs
nothing extra; a prologue is re-evaluated by every invocation that loads the element, so it is the second
choice. Consumers are the kernels that declare `prologue_leaves_from`, and only when their support check
accepts the merged op (which also keeps it off the CPU fallback, which could not run it).
"""

from __future__ import annotations

from ..model.ir import Graph, Op
from ..model.ops import ExpressionStep as Step
from ..model.ops import leaf_kind
from . import kernel_support
from .graph_utils import consumers, producer, rounds, sole_consumer, with_fields


def fuse_input_expression(graph: Graph) -> Graph:
    graph = graph.copy()
    for consumer in list(graph.ops):
        first_leaf = kernel_support.prologue_leaves_from(consumer)
        if first_leaf is None or consumer.opt("prologue") or not consumer.inputs or consumer.inputs[0] < 0:
            continue
        root = consumer.inputs[0]
        if sole_consumer(graph, root) is not consumer or len(graph.tensors[root].shape) != 4:
            continue
        tree = _tree(graph, root)
        if not tree:
            continue
        merged = _merge(graph, consumer, tree, first_leaf)
        if merged is None or kernel_support.check(merged, graph) is not None:
            continue
        graph.ops = [merged if o is consumer else o for o in graph.ops if not any(o is t for t in tree)]
    return graph


def _inline(graph: Graph, t: int, shape: tuple[int, ...]) -> Op | None:
    """The op producing t, when it can be evaluated inline with the result's shape."""
    op = producer(graph, t)
    if op is None or len(op.outputs) != 1 or kernel_support.expression_of(op) is None \
            or kernel_support.check(op, graph) is not None or rounds(graph, t):
        return None
    return op if graph.tensors[t].shape == shape else None


def _tree(graph: Graph, root: int) -> list[Op]:
    """The ops computing `root` from leaves, producers first: inner tensors are read by their parent alone."""
    shape = graph.tensors[root].shape
    ops: list[Op] = []

    def visit(t: int, parent: Op | None) -> None:
        op = _inline(graph, t, shape)
        if op is None or (parent is not None and sole_consumer(graph, t) is not parent):
            return
        for u in dict.fromkeys(op.inputs):
            visit(u, op)
        ops.append(op)

    visit(root, None)
    return ops


def _merge(graph: Graph, consumer: Op, tree: list[Op], first_leaf: int) -> Op | None:
    shape = graph.tensors[consumer.inputs[0]].shape
    if len(consumer.inputs) > first_leaf:
        return None
    inner = {op.outputs[0]: j for j, op in enumerate(tree)}
    leaves = list(dict.fromkeys(t for op in tree for t in op.inputs if t not in inner))
    if any(t < 0 or leaf_kind(graph, t, shape) is None for t in leaves):
        return None
    full = [t for t in leaves if graph.tensors[t].data is None and graph.tensors[t].shape == shape]
    if not full or any(_could_host(graph, t, tree) for t in full):
        return None
    own = consumer.inputs[1:first_leaf] + [-1] * (first_leaf - len(consumer.inputs))
    rest = [t for t in leaves if t != full[0]]
    inputs = [full[0], *own, *rest]
    index = {full[0]: 0, **{t: first_leaf + k for k, t in enumerate(rest)}}
    steps = tuple(Step(op, tuple(index[t] if t in index else -1 - inner[t] for t in op.inputs)) for op in tree)
    return with_fields(consumer, inputs, prologue=steps)


def _could_host(graph: Graph, leaf: int, tree: list[Op]) -> bool:
    """A leaf only the tree reads, written by an op: epilogue fusion can take the tree there, for free."""
    readers = consumers(graph, leaf)
    return (producer(graph, leaf) is not None and leaf not in graph.outputs
            and all(any(r is op for op in tree) for r in readers))
