"""Partitioning on synthetic graphs: maximal GPU runs, exact boundaries, no needless fragmentation."""

from __future__ import annotations

import numpy as np
import pytest
from gpuengine.delegate.partition import Partition, partition

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Graph
from gpuengine.model.reader import read_model

SHAPE = (1, 4)


class Chain:
    """Builds a graph op by op; every op is a unary or binary float op on SHAPE tensors."""

    def __init__(self) -> None:
        self.mb = ModelBuilder()
        self.cpu_ops: set[int] = set()

    def input(self, name: str) -> int:
        return self.mb.input(name, SHAPE)

    def const(self, name: str) -> int:
        return self.mb.const(name, np.ones(SHAPE, np.float32))

    def op(self, *inputs: int, cpu: bool = False, code: str | None = None) -> int:
        if cpu:
            self.cpu_ops.add(len(self.mb.ops))
        code = code or ("ADD" if len(inputs) == 2 else "RELU")
        return self.mb.op(code, list(inputs), SHAPE)  # type: ignore[return-value]

    def graph(self, *outputs: int) -> tuple[Graph, dict[int, str | None]]:
        self.mb.output(*outputs)
        graph = read_model(self.mb.build()).main
        support: dict[int, str | None] = {i: ("no GPU kernel" if i in self.cpu_ops else None)
                                          for i in range(len(graph.ops))}
        return graph, support


def check_invariants(graph: Graph, support: dict[int, str | None], parts: list[Partition]) -> None:
    """Every op exactly once, on its device, after its producers; boundaries exactly as the definition."""
    order = [i for p in parts for i in p.ops]
    assert sorted(order) == list(range(len(graph.ops)))
    position = {op: k for k, op in enumerate(order)}
    producers = graph.producers()
    for i, op in enumerate(graph.ops):
        for t in op.inputs:
            if t >= 0 and t in producers:
                assert position[producers[t]] < position[i], f"op {i} runs before the producer of tensor {t}"
    for p in parts:
        assert p.device == ("gpu" if all(support[i] is None for i in p.ops) else "cpu")
        assert all((support[i] is None) == (p.device == "gpu") for i in p.ops)
    for a, b in zip(parts, parts[1:]):
        assert a.device != b.device, "two adjacent partitions on the same device should have been merged"
    # Maximal: when a partition ends, no op left for later could already have joined it.
    done: set[int] = set()
    for p in parts:
        done.update(p.ops)
        for i, op in enumerate(graph.ops):
            if i not in done and (support[i] is None) == (p.device == "gpu"):
                ready = all(producers[t] in done for t in op.inputs if t >= 0 and t in producers)
                assert not ready, f"op {i} was ready but left out of partition {p.ops}"
    for p in parts:
        inside = set(p.ops)
        produced = {t for i in p.ops for t in graph.ops[i].outputs}
        want_in = {t for i in p.ops for t in graph.ops[i].inputs
                   if t >= 0 and t not in produced and graph.tensors[t].data is None}
        assert set(p.inputs) == want_in and len(p.inputs) == len(want_in)
        needed_outside = set(graph.outputs) | {t for j, op in enumerate(graph.ops) if j not in inside
                                               for t in op.inputs}
        want_out = produced & needed_outside
        assert set(p.outputs) == want_out and len(p.outputs) == len(want_out)


def devices(parts: list[Partition]) -> list[str]:
    return [p.device for p in parts]


def test_all_gpu_is_one_partition() -> None:
    c = Chain()
    x = c.input("x")
    k = c.const("k")
    y = c.op(c.op(c.op(x), k), x)
    graph, support = c.graph(y)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert devices(parts) == ["gpu"]
    assert parts[0].ops == [0, 1, 2]
    assert parts[0].inputs == [x]  # the constant is not a boundary input
    assert parts[0].outputs == [y]


def test_all_cpu_is_one_partition() -> None:
    c = Chain()
    x = c.input("x")
    y = c.op(c.op(x, cpu=True), cpu=True)
    graph, support = c.graph(y)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert devices(parts) == ["cpu"] and parts[0].ops == [0, 1]


def test_cpu_island_between_gpu_ops() -> None:
    c = Chain()
    x = c.input("x")
    a = c.op(x)                 # op 0 gpu
    b = c.op(a)                 # op 1 gpu
    m = c.op(b, cpu=True)       # op 2 cpu
    d = c.op(m, a)              # op 3 gpu: also reads a, produced two partitions earlier
    e = c.op(d)                 # op 4 gpu
    graph, support = c.graph(e)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert devices(parts) == ["gpu", "cpu", "gpu"]
    assert [p.ops for p in parts] == [[0, 1], [2], [3, 4]]
    assert parts[0].inputs == [x] and set(parts[0].outputs) == {a, b}
    assert parts[1].inputs == [b] and parts[1].outputs == [m]
    assert set(parts[2].inputs) == {m, a} and parts[2].outputs == [e]


def test_intermediate_graph_output_is_exported() -> None:
    c = Chain()
    x = c.input("x")
    a = c.op(x)
    b = c.op(a)
    graph, support = c.graph(b, a)  # `a` is consumed inside the partition and also a model output
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert set(parts[0].outputs) == {a, b}


def test_independent_branches_do_not_fragment() -> None:
    # Two independent chains, one all-GPU and one all-CPU, interleaved in the file's op order:
    # g0 c0 g1 c1 g2 c2, then a GPU join. File order would give seven partitions; running the CPU chain
    # first lets the whole GPU chain and the join share one partition: two in all.
    c = Chain()
    x = c.input("x")
    g = x
    k = x
    for _ in range(3):
        g = c.op(g)
        k = c.op(k, cpu=True)
    out = c.op(g, k)  # a GPU join at the end
    graph, support = c.graph(out)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert len(parts) == 2, [p.ops for p in parts]
    assert devices(parts) == ["cpu", "gpu"]
    assert parts[0].ops == [1, 3, 5] and parts[1].ops == [0, 2, 4, 6]


def test_cpu_first_branch_still_merges_gpu_work() -> None:
    # The first ready op is on the CPU; the GPU ops that do not depend on it should all run together.
    c = Chain()
    x = c.input("x")
    cpu = c.op(x, cpu=True)                     # op 0 cpu
    g1 = c.op(x)                                # op 1 gpu
    g2 = c.op(g1)                               # op 2 gpu
    join = c.op(cpu, g2)                        # op 3 gpu, needs both
    graph, support = c.graph(join)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert len(parts) == 2, [(p.device, p.ops) for p in parts]
    assert devices(parts) == ["cpu", "gpu"] and parts[1].ops == [1, 2, 3]


def test_gpu_ops_on_both_sides_of_an_unrelated_cpu_op() -> None:
    # gpu op, unrelated cpu op, gpu op depending only on the first: the GPU ops belong together.
    c = Chain()
    x = c.input("x")
    y = c.input("y")
    a = c.op(x)                 # op 0 gpu
    side = c.op(y, cpu=True)    # op 1 cpu, independent
    b = c.op(a)                 # op 2 gpu
    graph, support = c.graph(b, side)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert [(p.device, p.ops) for p in parts] == [("gpu", [0, 2]), ("cpu", [1])]
    assert parts[0].outputs == [b] and parts[1].inputs == [y] and parts[1].outputs == [side]


def test_alternating_dependent_chain_must_fragment() -> None:
    c = Chain()
    t = c.input("x")
    for i in range(6):
        t = c.op(t, cpu=i % 2 == 1)
    graph, support = c.graph(t)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert devices(parts) == ["gpu", "cpu"] * 3
    for p, q in zip(parts, parts[1:]):
        assert p.outputs == q.inputs  # each partition hands exactly its result to the next


def test_optional_inputs_and_multiple_outputs() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 2))
    w = mb.const("w", np.ones((1, 3, 3, 2), np.float32))
    dw = mb.op("DEPTHWISE_CONV_2D", [x, w, -1], (1, 4, 4, 2),
               options={"padding": "SAME", "stride_w": 1, "stride_h": 1, "depth_multiplier": 1})
    halves = mb.op("SPLIT", [mb.const("axis", np.array(3, np.int32)), dw], [(1, 4, 4, 1), (1, 4, 4, 1)],
                   options={"num_splits": 2})
    r = mb.op("RELU", [halves[1]], (1, 4, 4, 1))
    mb.output(r)
    graph = read_model(mb.build()).main
    support: dict[int, str | None] = {0: None, 1: "split unsupported", 2: None}
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert [(p.device, p.ops) for p in parts] == [("gpu", [0]), ("cpu", [1]), ("gpu", [2])]
    assert parts[0].inputs == [x] and -1 not in parts[0].inputs
    assert parts[1].inputs == [dw]
    assert parts[1].outputs == [halves[1]]  # the unused half is not exported
    assert parts[2].inputs == [halves[1]]


def test_empty_graph() -> None:
    graph = Graph(tensors=[], ops=[], inputs=[], outputs=[])
    assert partition(graph, {}) == []


def random_graph(seed: int) -> tuple[Graph, dict[int, str | None]]:
    rng = np.random.default_rng(seed)
    c = Chain()
    pool = [c.input("x"), c.input("y")]
    konst = c.const("k")
    for _ in range(int(rng.integers(4, 13))):
        if rng.random() < 0.5:
            a, b = rng.choice(len(pool), 2)
            args = [pool[a], pool[b] if rng.random() < 0.8 else konst]
        else:
            args = [pool[int(rng.integers(len(pool)))]]
        pool.append(c.op(*args, cpu=bool(rng.random() < 0.35)))
    graph, support = c.graph(pool[-1], pool[-2])
    return graph, support


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_keep_invariants(seed: int) -> None:
    graph, support = random_graph(seed)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)


def test_random_graphs_fewest_partitions() -> None:
    worse = []
    for seed in range(40):
        graph, support = random_graph(seed)
        parts = partition(graph, support)
        best = fewest_partitions(graph, support)
        if len(parts) != best:
            worse.append((seed, best, [(p.device, p.ops) for p in parts]))
    assert not worse, f"{len(worse)} of 40 graphs split into more partitions than needed: {worse[:3]}"


def test_starting_device_is_chosen_to_avoid_a_partition() -> None:
    # gpu op 0 (independent), cpu op 1 (independent), gpu op 2 joins both: cpu[1] gpu[0, 2] is two
    # partitions; starting on the GPU because op 0 comes first gives three.
    c = Chain()
    x = c.input("x")
    y = c.input("y")
    a = c.op(x)
    m = c.op(y, cpu=True)
    out = c.op(a, m)
    graph, support = c.graph(out)
    parts = partition(graph, support)
    check_invariants(graph, support, parts)
    assert [(p.device, p.ops) for p in parts] == [("cpu", [1]), ("gpu", [0, 2])]


def fewest_partitions(graph: Graph, support: dict[int, str | None]) -> int:
    """Brute force over every dependency-respecting order: the least number of device runs possible."""
    n = len(graph.ops)
    producers = graph.producers()
    deps = [sum(1 << d for d in {producers[t] for t in op.inputs if t >= 0 and t in producers})
            for op in graph.ops]
    device = [0 if support[i] is None else 1 for i in range(n)]
    inf = n + 1
    best = [[inf, inf] for _ in range(1 << n)]  # best[done][last device] = runs so far
    for i in range(n):
        if deps[i] == 0:
            best[1 << i][device[i]] = 1
    for done in range(1 << n):  # supersets are numerically larger, so one pass in order suffices
        for last in (0, 1):
            runs = best[done][last]
            if runs == inf:
                continue
            for i in range(n):
                if not done >> i & 1 and deps[i] & done == deps[i]:
                    nxt = done | 1 << i
                    cost = runs + (device[i] != last)
                    if cost < best[nxt][device[i]]:
                        best[nxt][device[i]] = cost
    return min(best[(1 << n) - 1]) if n else 0
