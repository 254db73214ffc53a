"""Split a graph into maximal GPU partitions and CPU partitions, in an order that respects dependencies.

Ops are scheduled topologically, always preferring a ready op on the current device, so independent CPU
and GPU ops do not needlessly fragment a partition (the TFLite delegate does the same by node reordering).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuengine.model.ir import Graph


@dataclass
class Partition:
    device: str  # "gpu" or "cpu"
    ops: list[int]
    inputs: list[int]  # non-constant tensors read here and produced elsewhere (or graph inputs)
    outputs: list[int]  # tensors produced here and needed elsewhere (or graph outputs)


def partition(graph: Graph, support: dict[int, str | None], control: set[int] | None = None) -> list[Partition]:
    """Maximal partitions: the greedy schedule from each starting device, keeping the one with fewer. Ops in
    `control` (WHILE / IF the host drives, control_flow.py) are partitions of one op each, device "control"."""
    control = control or set()
    device_of = {i: "control" if i in control else "gpu" if support.get(i) is None else "cpu"
                 for i in range(len(graph.ops))}
    candidates = [_schedule(graph, device_of, start) for start in ("gpu", "cpu")]
    best = min(candidates, key=len)  # min keeps the first (GPU-first) on a tie
    groups = [(dev, [i]) for dev, ops in best for i in ops] if control else best
    if control:  # merge back every run of non-control ops the split above took apart
        merged: list[tuple[str, list[int]]] = []
        for dev, ops in groups:
            if merged and dev != "control" and merged[-1][0] == dev:
                merged[-1][1].extend(ops)
            else:
                merged.append((dev, list(ops)))
        groups = merged
    return [_with_boundaries(graph, dev, ops) for dev, ops in groups]


def with_boundaries(graph: Graph, device: str, ops: list[int]) -> Partition:
    """The partition of `ops` on `device`, its inputs and outputs derived from the graph (planning splits a GPU
    partition around a spatially sparse block with it)."""
    return _with_boundaries(graph, device, ops)


def _schedule(graph: Graph, device_of: dict[int, str], start: str) -> list[tuple[str, list[int]]]:
    producers = graph.producers()
    deps: dict[int, set[int]] = {}
    for i, op in enumerate(graph.ops):
        deps[i] = {producers[t] for t in op.inputs if t >= 0 and t in producers}
    users: dict[int, list[int]] = {i: [] for i in deps}
    for i, ds in deps.items():
        for d in ds:
            users[d].append(i)
    pending = {i: len(ds) for i, ds in deps.items()}
    ready = sorted(i for i, n in pending.items() if n == 0)
    groups: list[tuple[str, list[int]]] = []
    current = start
    while ready:
        same = [i for i in ready if device_of[i] == current]
        if not same:
            current = device_of[ready[0]]
            continue
        i = same[0]
        ready.remove(i)
        if not groups or groups[-1][0] != current:
            groups.append((current, []))
        groups[-1][1].append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
        ready.sort()
    return groups


def _with_boundaries(graph: Graph, device: str, ops: list[int]) -> Partition:
    inside = set(ops)
    produced = {t for i in ops for t in graph.ops[i].outputs}
    inputs: list[int] = []
    for i in ops:
        for t in graph.ops[i].inputs:
            if t >= 0 and t not in produced and graph.tensors[t].data is None and t not in inputs:
                inputs.append(t)
    needed = set(graph.outputs)
    for j, op in enumerate(graph.ops):
        if j not in inside:
            needed.update(t for t in op.inputs if t >= 0)
    outputs = [t for i in ops for t in graph.ops[i].outputs if t in needed]
    return Partition(device=device, ops=ops, inputs=inputs, outputs=outputs)
