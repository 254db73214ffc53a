"""Oracle helpers shared by the tests and the CLI: run a model on LiteRT's CPU runtime and on gpuengine, compare.

The acceptance rule everywhere: max |gpu - ref| <= tol * max(1, max |ref|), per output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .interpreter import Interpreter
from .model.reader import read_model


def random_inputs(model: bytes, seed: int = 0, low: float = -1.0, high: float = 1.0) -> dict[int, np.ndarray]:
    graph = read_model(model).main
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in graph.inputs:
        tensor = graph.tensors[t]
        if np.issubdtype(tensor.dtype, np.floating):
            feeds[t] = rng.uniform(low, high, tensor.shape).astype(tensor.dtype)
        else:
            feeds[t] = rng.integers(0, 4, tensor.shape).astype(tensor.dtype)
    return feeds


def run_litert(model: bytes, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    it = LiteRT(model_content=model)
    it.allocate_tensors()
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def run_gpuengine(model: bytes, feeds: dict[int, np.ndarray], **options: Any) -> tuple[dict[int, np.ndarray], Any]:
    it = Interpreter(model_content=model, **options)
    it.allocate_tensors()
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}, it


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max(1, max |ref|); inf when shapes differ or NaN appears only on one side."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    if not np.array_equal(np.isnan(got), np.isnan(ref)):
        return float("inf")
    mask = ~np.isnan(ref)
    if not mask.any():
        return 0.0
    with np.errstate(invalid="ignore"):  # inf - inf: equal infinities are handled just below
        diff = np.abs(got[mask] - ref[mask])
    diff[np.isinf(got[mask]) & (got[mask] == ref[mask])] = 0.0
    scale = max(1.0, float(np.max(np.abs(ref[mask][np.isfinite(ref[mask])]), initial=0.0)))
    return float(np.max(diff, initial=0.0) / scale)


def assert_matches_litert(model: bytes, feeds: dict[int, np.ndarray] | None = None, tol: float = 1e-4,
                          all_gpu: bool = True, seed: int = 0, **options: Any) -> Any:
    """Compare every output with LiteRT; with all_gpu, also require that no op fell back to the CPU."""
    feeds = feeds if feeds is not None else random_inputs(model, seed)
    ref = run_litert(model, feeds)
    got, it = run_gpuengine(model, feeds, **options)
    if all_gpu:
        plan = it.compiled.plan
        cpu = {plan.graph.ops[i].code: plan.support[i] for p in plan.partitions if p.device == "cpu" for i in p.ops}
        assert not cpu, f"ops fell back to the CPU: {cpu}"
    for t, r in ref.items():
        err = relative_error(got[t], r)
        assert err <= tol, (f"output {t} differs from LiteRT: relative error {err:.3g} > {tol} "
                            f"(shape {r.shape}, max|ref| {np.abs(r).max() if r.size else 0:.3g})")
    return it


FUSED_ACTIVATIONS = ["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]  # the ones the GPU kernels apply


def lowering(model: bytes, op: int = 0) -> list:
    """The dispatch specs (and aliases) the kernel builds for op `op` of the model, no passes applied."""
    from .kernels import registry

    graph = read_model(model).main
    return registry.kernel_for(graph.ops[op]).build(graph.ops[op], graph)


def support_reason(model: bytes, op: int = 0) -> str | None:
    """Why op `op` of the model cannot run on the GPU, or None."""
    from .kernels import registry

    graph = read_model(model).main
    return registry.check(graph.ops[op], graph)
