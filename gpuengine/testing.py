"""Test helpers: run a model on gpuengine and compare with the oracle (gpuengine/oracle.py), look at a kernel's
lowering. Library code never imports this module.

The acceptance rule everywhere: max |gpu - ref| <= tol * max(1, max |ref|), per output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .interpreter import Interpreter
from .model.reader import read_model
from .oracle import random_inputs, relative_error, run_litert

__all__ = ["FP16_TOLERANCE", "FUSED_ACTIVATIONS", "assert_matches_litert", "lowering", "random_inputs",
           "relative_error", "run_gpuengine", "run_litert", "support_reason", "tolerance"]


def run_gpuengine(model: bytes, feeds: dict[int, np.ndarray], **options: Any) -> tuple[dict[int, np.ndarray], Any]:
    it = Interpreter(model_content=model, **options)
    it.allocate_tensors()
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}, it


FP16_TOLERANCE = 1e-2  # the fp16 mode's goal: max |Δ| / max(1, max |ref|) against LiteRT's fp32 kernels


def tolerance(it: Any, tol: float) -> float:
    """`tol`, or FP16_TOLERANCE when the interpreter runs in fp16 (its tensors are stored as f16)."""
    return max(tol, FP16_TOLERANCE) if it.compiled.precision == "fp16" else tol


def assert_matches_litert(model: bytes, feeds: dict[int, np.ndarray] | None = None, tol: float = 1e-4,
                          all_gpu: bool = True, seed: int = 0, **options: Any) -> Any:
    """Compare every output with LiteRT; with all_gpu, also require that no op fell back to the CPU. When the
    model runs in fp16 (precision="fp16", or env GPUENGINE_PRECISION=fp16), the tolerance is at least
    FP16_TOLERANCE."""
    feeds = feeds if feeds is not None else random_inputs(model, seed)
    ref = run_litert(model, feeds)
    got, it = run_gpuengine(model, feeds, **options)
    tol = tolerance(it, tol)
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


def lowering(model: bytes, op: int = 0, decide: Any = None) -> list:
    """The dispatch specs (and aliases) the kernel builds for op `op` of the model, no passes applied; a
    dispatch offered in several decompositions is resolved by `decide` (default: the first candidate)."""
    from .fusion import first_candidate
    from .kernels import registry
    from .kernels.base import Variants

    graph = read_model(model).main
    items = registry.kernel_for(graph.ops[op]).build(graph.ops[op], graph)
    decide = decide or first_candidate
    return [item.resolve(decide(item)) if isinstance(item, Variants) else item for item in items]


def support_reason(model: bytes, op: int = 0) -> str | None:
    """Why op `op` of the model cannot run on the GPU, or None."""
    from .kernels import registry

    graph = read_model(model).main
    return registry.check(graph.ops[op], graph)
