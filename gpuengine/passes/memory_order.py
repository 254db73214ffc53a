"""Execution order for memory (SoD²'s static execution planning): among the orders the data dependences allow,
one that lowers the peak of live intermediate tensors.

A tensor an op produces is live from that op until its last consumer has run (a graph output: to the end);
while an op runs, its inputs and its outputs are live together. The peak over the ops of an order is what any
memory planner must at least give the intermediates (memory/bounds.py's lower bound is the same figure for the
engine's own order), so a lower peak lowers what the best plan can reach.

- `exact_order`: the minimum-peak order, by dynamic programming over the sets of ops already run (a set's live
  bytes do not depend on the order inside it); for graphs whose number of such sets stays under a limit.
- `greedy_order`: memory-aware list scheduling for the others: of the ready ops, the one with the lowest peak
  while it runs, then the one that frees the most, then the earliest in the file.
- `memory_order`: exact where it fits, else greedy, and never worse than the file's order (kept on ties).
- `reorder_for_memory`: the pass (IR -> IR), ops rearranged, nothing else touched.

Constraints beyond data: ops with effects (variables, control flow, random numbers, the KV cache writes, ops on
variable tensors) keep their order among themselves. Not modelled: fusion (lowering fuses ops that are adjacent
in the order it gets, so an order that separates a producer from its consumer can cost a dispatch) and the
engine's one submit per invoke (the order does not change the submits; it changes which buffers may share).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model.ir import Graph

ORDERED_CODES = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "WHILE", "IF",
                           "KV_CACHE_WRITE", "RANDOM_UNIFORM", "RANDOM_STANDARD_NORMAL", "MULTINOMIAL"})
EXACT_STATE_LIMIT = 100000  # sets of ops the exact search may visit before it gives way to the greedy


@dataclass
class OrderReport:
    """The peaks of the file's order and the chosen one (bytes of live intermediates), and how it was found."""

    before: int
    after: int
    method: str  # "exact" or "greedy", with ": the file's order" when that is as low
    order: list[int]
    bound: int = 0  # no order can go below: the largest inputs + outputs of one op

    def to_json(self) -> dict[str, object]:
        return {"before": self.before, "after": self.after, "method": self.method, "bound": self.bound}


class _Deps:
    """The graph as the search reads it: each op's predecessors, outputs' bytes, and when tensors die."""

    def __init__(self, graph: Graph) -> None:
        n = len(graph.ops)
        producer = {t: i for i, op in enumerate(graph.ops) for t in op.outputs}
        self.n = n
        self.preds: list[set[int]] = [set() for _ in range(n)]
        self.consumers: dict[int, set[int]] = {}
        for i, op in enumerate(graph.ops):
            for t in op.inputs:
                if t >= 0 and t in producer and producer[t] != i:
                    self.preds[i].add(producer[t])
                if t >= 0:
                    self.consumers.setdefault(t, set()).add(i)
        last_effect = -1
        for i, op in enumerate(graph.ops):
            touches_variable = any(t >= 0 and graph.tensors[t].is_variable for t in [*op.inputs, *op.outputs])
            if op.code in ORDERED_CODES or touches_variable:
                if last_effect >= 0:
                    self.preds[i].add(last_effect)
                last_effect = i
        outputs = set(graph.outputs)
        self.produced: list[list[int]] = [[t for t in op.outputs if t >= 0] for op in graph.ops]
        self.size = {t: _bytes(graph, t) for op in graph.ops for t in op.outputs if t >= 0}
        self.kept = {t for t in self.size if t in outputs}
        self.reads: list[set[int]] = [{t for t in op.inputs if t in self.size} for op in graph.ops]

    def op_bound(self) -> int:
        """A lower bound on any order's peak: while an op runs, its intermediate inputs and outputs are live."""
        return max((sum(self.size[t] for t in self.reads[i] | set(self.produced[i])) for i in range(self.n)),
                   default=0)

    def peak_of(self, order: Sequence[int]) -> int:
        """The peak of live intermediates when the ops run in `order`."""
        remaining = {t: len(c) for t, c in self.consumers.items()}
        live = peak = 0
        for i in order:
            live += sum(self.size[t] for t in self.produced[i])
            peak = max(peak, live)
            for t in self.produced[i]:  # an output nobody reads (and no graph output) dies at once
                if t not in self.kept and not self.consumers.get(t):
                    live -= self.size[t]
            for t in self.reads[i]:
                remaining[t] -= 1
                if remaining[t] == 0 and t not in self.kept:
                    live -= self.size[t]
        return peak


def _bytes(graph: Graph, t: int) -> int:
    tensor = graph.tensors[t]
    if tensor.data is not None or any(d < 0 for d in tensor.shape):
        return 0
    return int(tensor.size) * tensor.dtype.itemsize


def exact_order(graph: Graph, state_limit: int = EXACT_STATE_LIMIT, bound: int | None = None) -> list[int] | None:
    """A minimum-peak order (None when the search would visit more than `state_limit` sets of ops). bound: the
    peak of an order known already (branch and bound: sets whose peak is above it are not followed)."""
    deps = _Deps(graph)
    n = deps.n
    pred_mask = [sum(1 << p for p in deps.preds[i]) for i in range(n)]
    consumer_mask = {t: sum(1 << c for c in cs) for t, cs in deps.consumers.items()}
    grows = [sum(deps.size[t] for t in deps.produced[i]) for i in range(n)]
    # after op i, the tensors that die: its reads whose consumers have all run, its outputs nobody reads
    dead_outputs = [sum(deps.size[t] for t in deps.produced[i] if t not in deps.kept and t not in consumer_mask)
                    for i in range(n)]

    # best[state] = (peak so far, live bytes, previous state, op run last); states grow one op at a time
    best: dict[int, tuple[int, int, int, int]] = {0: (0, 0, -1, -1)}
    layer = [0]
    for _ in range(n):
        following: dict[int, tuple[int, int, int, int]] = {}
        for done in layer:
            peak, live = best[done][0], best[done][1]
            for i in range(n):
                if done >> i & 1 or pred_mask[i] & ~done:
                    continue
                state = done | 1 << i
                cost = max(peak, live + grows[i])
                if (bound is not None and cost > bound) or (state in following and cost >= following[state][0]):
                    continue
                freed = dead_outputs[i] + sum(deps.size[t] for t in deps.reads[i]
                                              if t not in deps.kept and not consumer_mask[t] & ~state)
                following[state] = (cost, live + grows[i] - freed, done, i)
                if len(following) + len(best) > state_limit:
                    return None
        best.update(following)
        layer = list(following)
    order = []
    state = (1 << n) - 1
    while state:
        _, _, previous, op = best[state]
        order.append(op)
        state = previous
    return order[::-1]


def greedy_order(graph: Graph) -> list[int]:
    """Memory-aware list scheduling: the ready op with the lowest peak while it runs, then the one freeing most."""
    deps = _Deps(graph)
    remaining = {t: len(c) for t, c in deps.consumers.items()}
    waiting = [len(p) for p in deps.preds]
    succs: list[list[int]] = [[] for _ in range(deps.n)]
    for i, ps in enumerate(deps.preds):
        for p in ps:
            succs[p].append(i)
    ready = {i for i in range(deps.n) if waiting[i] == 0}
    live = 0
    order = []
    while ready:
        def score(i: int, live: int = live) -> tuple[int, int, int]:
            grows = sum(deps.size[t] for t in deps.produced[i])
            frees = sum(deps.size[t] for t in deps.reads[i] if remaining[t] == 1 and t not in deps.kept)
            return live + grows, grows - frees, i
        i = min(ready, key=score)
        ready.remove(i)
        order.append(i)
        live += sum(deps.size[t] for t in deps.produced[i])
        for t in deps.reads[i]:
            remaining[t] -= 1
            if remaining[t] == 0 and t not in deps.kept:
                live -= deps.size[t]
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.add(s)
    return order


def peak_of(graph: Graph, order: Sequence[int] | None = None) -> int:
    """The peak of live intermediates (bytes) for `order` (default: the file's)."""
    return _Deps(graph).peak_of(range(len(graph.ops)) if order is None else order)


def memory_order(graph: Graph, state_limit: int = EXACT_STATE_LIMIT) -> OrderReport:
    """The order with the lowest peak this module finds, never worse than the file's."""
    deps = _Deps(graph)
    file_order = list(range(deps.n))
    before = deps.peak_of(file_order)
    greedy = greedy_order(graph)
    bound = min(before, deps.peak_of(greedy))
    order = exact_order(graph, state_limit, bound)
    method = "exact"
    if order is None:
        order, method = greedy, "greedy"
    after = deps.peak_of(order)
    bound = deps.op_bound()
    if after >= before:  # the file's order is kept on ties (it keeps the converter's fusable neighbours)
        order, after, method = file_order, before, f"{method}: the file's order"
    if after == bound and not method.startswith("exact"):
        method += " (optimal: at the bound)"
    return OrderReport(before, after, method, order, bound)


def reorder_for_memory(graph: Graph) -> Graph:
    """The pass: the graph with its ops in memory_order's order."""
    report = memory_order(graph)
    if report.order == list(range(len(graph.ops))):
        return graph
    out = graph.copy()
    out.ops = [out.ops[i] for i in report.order]
    return out
