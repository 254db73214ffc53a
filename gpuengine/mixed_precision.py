"""Mixed precision: tensors an fp16 program keeps in f32, and the search that picks them.

An fp16 program stores every tensor as f16 (relative rounding up to 4.9e-4). Most models carry that to their
outputs unamplified (README, Precision), but an ill-conditioned one does not: pose_landmark_full's segmentation
logits are 0.2-0.4 of their range off even in an engine whose every op is correctly rounded to f16, because a
rounding anywhere in its backbone is amplified ~10^3 times. `f32_tensors` (an Interpreter option) names tensors
stored as f32 inside an fp16 program (lowering/storage_precision.py kept_f32: the dispatch writing one stores in f32,
its readers convert on load); `search` finds such a set with the float64 reference executor (gpuengine/reference.py),
without a GPU:

1. candidates: the tensors the fp16 program would store (after graph passes and fusion; planned, not compiled);
2. the exact result, and the result with every candidate rounded to f16, on seeded inputs: if that is within the
   target already, no tensor needs f32 (nearly every model);
3. otherwise each candidate's sensitivity: the output error when it alone is rounded (runs resume after the ops
   before it); candidates are kept in f32 most sensitive first, and the shortest such prefix whose complement,
   all rounded, is within the target is found by bisection.

The result's error is the emulation's (every candidate rounded once, everything else exact): the engine adds
its own f16 products on top, so `gpuengine precision --f32-tensors FILE` measures the real run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .model.ir import Graph, Model
from .model.reader import read_model
from .model.validate import validate_model
from .oracle import random_inputs, relative_error
from .reference import is_real, run_reference

SEARCH_TARGET = 2.5e-3  # a quarter of the fp16 goal (1e-2), leaving the rest to the engine's f16 products


@dataclass
class MixedPrecision:
    """A search's result: the tensors to keep in f32 and what the emulation measured."""

    f32_tensors: list[str] = field(default_factory=list)
    target: float = SEARCH_TARGET
    error: float = 0.0  # emulated fp16 error (vs float64) with f32_tensors kept f32
    error_all_f16: float = 0.0  # the same with every candidate rounded to f16
    candidates: int = 0
    f32_elements: float = 0.0  # share of the candidates' elements kept in f32
    sensitivity: dict[str, float] = field(default_factory=dict)  # error of each kept tensor rounded alone

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)


def stored_tensor_names(graph: Graph) -> set[str]:
    """Names of the tensors the GPU programs of `graph` store (planned as an fp16 program would be)."""
    from .latency.target import named
    from .lowering.storage_precision import stores_tensor
    from .options import EngineOptions
    from .planning import planned_dispatches

    plan, partitions = planned_dispatches(graph, EngineOptions(precision="fp16"), named("discrete"))
    return {plan.graph.tensors[b.tensor].name for specs in partitions for spec in specs for b in spec.bindings
            if stores_tensor(b)}


def search(model: bytes | str | os.PathLike | Model, target: float = SEARCH_TARGET, seeds: int = 2,
           progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> MixedPrecision:
    """The tensors an fp16 program of `model` keeps in f32 so that its emulated error stays within `target` on
    `seeds` seeded inputs (module docstring). progress: wraps the sensitivity loop (tqdm, say)."""
    if not isinstance(model, Model):
        model = read_model(model)
        validate_model(model)
    from .model.builder import write_model

    graph = model.main
    data = write_model(model)
    feeds = [random_inputs(data, seed) for seed in range(seeds)]
    exact = [run_reference(graph, f, all_tensors=True) for f in feeds]
    stored = stored_tensor_names(graph)
    producer = {t: k for k, op in enumerate(graph.ops) for t in op.outputs}
    candidates = [t.index for t in graph.tensors if t.name in stored and t.data is None and is_real(t)
                  and (t.index in producer or t.index in graph.inputs)]
    size = {t: int(np.prod(graph.tensors[t].shape, dtype=np.int64)) for t in candidates}

    def error(rounded: Iterable[int]) -> float:
        rounded = set(rounded)
        first = min((producer.get(t, -1) for t in rounded), default=len(graph.ops))
        worst = 0.0
        for f, ex in zip(feeds, exact):
            given = {t: v for t, v in ex.items() if producer.get(t, len(graph.ops)) < first}
            got = run_reference(graph, f, round_to=np.float16, round_only=rounded, given=given)
            worst = max(worst, max(relative_error(got[t], ex[t]) for t in graph.outputs))
        return worst

    result = MixedPrecision(target=target, candidates=len(candidates))
    result.error = result.error_all_f16 = error(candidates)
    if result.error <= target:
        return result
    loop = progress(candidates) if progress else candidates
    alone = {t: error([t]) for t in loop}
    order = sorted(candidates, key=lambda t: (-alone[t], size[t]))
    low, high = 0, len(order)  # keeping order[:high] in f32 meets the target (all of them: exact)
    errors = {high: 0.0}
    while low < high:
        mid = (low + high) // 2
        errors[mid] = error(order[mid:])
        if errors[mid] <= target:
            high = mid
        else:
            low = mid + 1
    kept = order[:high]
    result.error = errors.get(high, 0.0)
    result.f32_tensors = sorted(graph.tensors[t].name for t in kept)
    result.f32_elements = sum(size[t] for t in kept) / max(1, sum(size.values()))
    result.sensitivity = {graph.tensors[t].name: alone[t] for t in kept}
    return result
