"""Test helpers: run a model on gpuengine and compare with the oracle (gpuengine/oracle.py), look at a kernel's
lowering. Only tests import this module (tests/ is on pytest's pythonpath: `from helpers import ...`).

The acceptance rule everywhere: max |gpu - ref| <= tol * max(1, max |ref|), per output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuengine import Interpreter
from gpuengine.model.reader import read_model
from gpuengine.oracle import random_inputs, relative_error, run_litert

__all__ = ["FP16_TOLERANCE", "FUSED_ACTIVATIONS", "QUANTIZED_SHARE", "QUANTIZED_STEPS", "assert_matches_litert",
           "lowering", "quantized_agreement", "random_inputs", "relative_error", "run_gpuengine", "run_litert",
           "support_reason", "tolerance"]

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
FIXTURES = TESTS_DIR / "fixtures"
SHARED_MODELS = REPO_ROOT.parent / "shared" / "models"  # models kept beside the repository, not in git

GOAL_ERROR = 0.25  # the latency model's goal: median relative error of its predictions
GOAL_SPEARMAN = 0.8  # and rank correlation with the measured times

# The test matrix's mixed-precision switch, set by tests/conftest.py from env GPUENGINE_TEST_MIXED: "odd" or
# "even" keeps the tensors of that index parity in f32 in every run_gpuengine (with fp16), "" none.
mixed_parity = ""


def run_gpuengine(model: bytes, feeds: dict[int, np.ndarray], **options: Any) -> tuple[dict[int, np.ndarray], Any]:
    """Run `model` once. `mixed_parity` odd|even (the test suite's switch GPUENGINE_TEST_MIXED, with fp16) keeps
    the tensors of odd or even index in f32: every kernel then reads and writes both storage types beside each
    other."""
    parity = mixed_parity
    if parity in ("odd", "even") and "f32_tensors" not in options:
        tensors = read_model(model).main.tensors
        options["f32_tensors"] = [t.index for t in tensors if t.index % 2 == (parity == "odd")]
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
    FP16_TOLERANCE. Quantized integer outputs are compared in quantization steps (QUANTIZED_STEPS on at least
    QUANTIZED_SHARE of the elements), the int8 goal."""
    feeds = feeds if feeds is not None else random_inputs(model, seed)
    ref = run_litert(model, feeds)
    got, it = run_gpuengine(model, feeds, **options)
    tol = tolerance(it, tol)
    if all_gpu:
        plan = it.compiled.plan
        cpu = {plan.graph.ops[i].code: plan.support[i] for p in plan.partitions if p.device == "cpu" for i in p.ops}
        assert not cpu, f"ops fell back to the CPU: {cpu}"
    for t, r in ref.items():
        if np.issubdtype(r.dtype, np.integer) and it.compiled.plan.graph.tensors[t].quantization is not None:
            share, steps = quantized_agreement(got[t], r)
            assert share >= QUANTIZED_SHARE, (f"output {t}: {share:.2%} of elements within {QUANTIZED_STEPS} "
                                              f"quantization steps of LiteRT's (goal {QUANTIZED_SHARE:.0%}); "
                                              f"max {steps} steps")
            continue
        err = relative_error(got[t], r)
        assert err <= tol, (f"output {t} differs from LiteRT: relative error {err:.3g} > {tol} "
                            f"(shape {r.shape}, max|ref| {np.abs(r).max() if r.size else 0:.3g})")
    return it


QUANTIZED_STEPS, QUANTIZED_SHARE = 2, 0.99  # int8 goal: within 2 steps of LiteRT's integer kernels on >= 99%


def quantized_agreement(got: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """(share of elements within QUANTIZED_STEPS of ref, largest difference) for quantized integer outputs."""
    diff = np.abs(np.asarray(got, np.int64) - np.asarray(ref, np.int64))
    return (float(np.mean(diff <= QUANTIZED_STEPS)) if diff.size else 1.0), int(diff.max(initial=0))


FUSED_ACTIVATIONS = ["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]  # the ones the GPU kernels apply


def lowering(model: bytes, op: int = 0, decide: Any = None) -> list:
    """The dispatch specs (and aliases) the kernel builds for op `op` of the model, no passes applied; a
    dispatch offered in several decompositions is resolved by `decide` (default: the first candidate)."""
    from gpuengine.lowering.fusion import first_candidate
    from gpuengine.lowering.kernels import registry
    from gpuengine.lowering.kernels.base import Variants

    graph = read_model(model).main
    items = registry.kernel_for(graph.ops[op]).build(graph.ops[op], graph)
    decide = decide or first_candidate
    return [item.resolve(decide(item)) if isinstance(item, Variants) else item for item in items]


def support_reason(model: bytes, op: int = 0) -> str | None:
    """Why op `op` of the model cannot run on the GPU, or None."""
    from gpuengine.lowering.kernels import registry

    graph = read_model(model).main
    return registry.check(graph.ops[op], graph)


def run(it: Any, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Set `feeds`, invoke, and return every output of an allocated interpreter."""
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def decode_feeds(runner, seed: int = 0, position: int = 5) -> dict[str, np.ndarray]:
    """Inputs of a litert-torch SmolLM decode step: a random token at `position`, caches random before it."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, d in runner.get_input_details().items():
        if name == "tokens":
            feeds[name] = np.array([[rng.integers(0, 49152)]], np.int32)
        elif name == "input_pos":
            feeds[name] = np.array([position], np.int32)
        else:
            cache = np.zeros(d["shape"], np.float32)
            cache[:, :position] = rng.standard_normal(cache[:, :position].shape)
            feeds[name] = cache
    return feeds


REFERENCE_MODELS = ["face_detection_short_range", "face_landmark", "selfie_segmentation", "hand_landmark_lite",
                    "palm_detection_lite", "pose_detection"]


def reference_model(name: str) -> bytes:
    from gpuengine.tools import fetch

    try:
        return fetch.model_path(name).read_bytes()
    except fetch.ModelsUnavailable as e:
        pytest.skip(f"reference models unavailable (offline?): {e}")


def cached_reference_model(name: str) -> bytes:
    """A reference model if it is cached (no download); skips the test otherwise."""
    from gpuengine.tools import fetch

    try:
        return fetch.model_path(name, download=False).read_bytes()
    except (fetch.ModelsUnavailable, KeyError) as e:
        pytest.skip(f"reference model {name} not cached: {e}")


def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that every shader-module and compute-pipeline creation on a wgpu-native device appends its name to,
    from now until the test ends (what "no shader compile at a new size" counts)."""
    from wgpu.backends.wgpu_native import GPUDevice

    compiles: list[str] = []
    for name in ("create_shader_module", "create_compute_pipeline"):
        original = getattr(GPUDevice, name)

        def counted(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            compiles.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(GPUDevice, name, counted)
    return compiles
