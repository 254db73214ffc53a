"""Real MediaPipe models end to end: everything on the GPU in one partition, outputs equal to LiteRT."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers import (
    REFERENCE_MODELS,
    REPO_ROOT,
    random_inputs,
    reference_model,
    relative_error,
    run_gpuengine,
    run_litert,
)

from gpuengine import Interpreter
from gpuengine.lowering.layout import to_bhwc
from gpuengine.memory import STRATEGIES
from gpuengine.runtime.program import GpuProgram

pytestmark = pytest.mark.models


@functools.cache
def _compiled(name: str, optimize: bool = True) -> tuple[dict, Interpreter]:
    data = reference_model(name)
    return run_gpuengine(data, random_inputs(data, seed=1, low=0.0, high=1.0), optimize=optimize)


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_runs_entirely_on_the_gpu_in_one_partition(name):
    _, it = _compiled(name)
    plan = it.compiled.plan
    assert plan.unsupported == {}
    assert plan.ops_gpu == len(plan.graph.ops)
    assert [p.device for p in plan.partitions] == ["gpu"]


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_matches_litert(name):
    data = reference_model(name)
    feeds = random_inputs(data, seed=1, low=0.0, high=1.0)
    got, _ = _compiled(name)
    ref = run_litert(data, feeds)
    for t, r in ref.items():
        assert relative_error(got[t], r) <= 1e-4, f"output {t}"


# The models whose passes and fusion do the most (input prologues, merged pads, elementwise trees, residual
# stacks). Each unfused compile costs ~0.5 min of shader compilation in CI; every model's fused output is
# checked against LiteRT above, and every op unfused in the op tests (GPUENGINE_OPTIMIZE=0).
UNFUSED_MODELS = ["face_detection_short_range", "selfie_segmentation", "pose_detection"]


@pytest.mark.parametrize("name", UNFUSED_MODELS)
def test_fused_and_unfused_agree(name):
    fused, it = _compiled(name, True)
    plain, it_plain = _compiled(name, False)
    assert it.compiled.dispatches < it_plain.compiled.dispatches
    for t in fused:
        assert relative_error(fused[t], plain[t]) <= 1e-5, f"output {t}"


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_no_standalone_elementwise_or_pad_dispatch(name):
    """The fusion criterion, literally: no PAD or identity op is dispatched, and no dispatch is a standalone
    elementwise kernel whose first input comes from a GPU kernel of the same partition (a tensor written by
    the partition's input conversion comes from the CPU side)."""
    _, it = _compiled(name)
    graph = it.compiled.graph
    for prog in it.compiled.programs:
        assert isinstance(prog, GpuProgram)
        written: dict[int, str] = {}  # root tensor -> shader of the dispatch that wrote it
        for k, d in enumerate(prog.dispatches):
            ops = [graph.ops[i] for i in d.spec.ops]
            standalone = [op.code for op in ops if op.code in ("PAD", "PADV2") or (
                op.code in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS")
                and to_bhwc(graph.tensors[op.inputs[0]].shape) == to_bhwc(graph.tensors[op.outputs[0]].shape))]
            assert not standalone, f"dispatch {k} runs {standalone} on its own"
            if d.spec.shader == "elementwise" and ops:
                first = ops[0].inputs[0]
                source = written.get(prog.root(first)) if graph.tensors[first].data is None else None
                assert source in (None, "bhwc_to_phwc4"), (
                    f"dispatch {k} ({d.spec.label}) is a standalone elementwise kernel on the output of {source}")
            for b in d.spec.bindings:
                if b.writable and b.tensor is not None and not b.raw:
                    written[prog.root(b.tensor)] = d.spec.shader


def test_memory_strategies_give_identical_outputs():
    data = reference_model("selfie_segmentation")
    feeds = random_inputs(data, seed=2, low=0.0, high=1.0)
    results = {}
    sizes = {}
    for strategy in STRATEGIES:
        out, it = run_gpuengine(data, feeds, memory_strategy=strategy)
        results[strategy] = out
        sizes[strategy] = sum(p.info.plan.total_bytes for p in it.compiled.programs if isinstance(p, GpuProgram))
    for strategy, out in results.items():
        for t, v in out.items():
            np.testing.assert_array_equal(v, results["naive"][t], err_msg=strategy)
    assert sizes["best"] <= min(sizes["greedy"], sizes["mincostflow"])
    assert sizes["greedy"] < sizes["naive"]


@pytest.mark.parametrize("name", ["face_detection_short_range", "hand_landmark_lite"])
def test_matches_litert_in_fp16(name):
    """f16 tensors and weights, f32 sums: within the fp16 tolerance of LiteRT's fp32 kernels (face detection has
    the largest difference of the reference models, 5.5e-3), in half the memory."""
    from helpers import FP16_TOLERANCE

    data = reference_model(name)
    feeds = random_inputs(data, seed=1, low=0.0, high=1.0)
    got, it = run_gpuengine(data, feeds, precision="fp16")
    assert it.compiled.precision == "fp16"
    for t, r in run_litert(data, feeds).items():
        assert relative_error(got[t], r) <= FP16_TOLERANCE, f"output {t}"
    _, fp32 = _compiled(name)
    memory = [sum(p.info.plan.total_bytes for p in i.compiled.gpu_programs) for i in (it, fp32)]
    assert memory[0] <= 0.55 * memory[1]


@pytest.mark.parametrize("api", ["interpreter", "compiled"])
def test_example_pipeline_runs(monkeypatch, capsys, api):
    """examples/segment_then_detect.py: the GPU-chained pipeline gives the host path's detections, through the
    Interpreter's GPU buffers and through CompiledModel's TensorBuffers."""
    import importlib.util
    import sys

    reference_model("selfie_segmentation")
    reference_model("face_detection_short_range")
    path = REPO_ROOT / "examples" / "segment_then_detect.py"
    spec = importlib.util.spec_from_file_location("segment_then_detect", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["segment_then_detect.py", "--frames", "2", "--api", api])
    assert module.main() == 0
    out = capsys.readouterr().out
    assert "GPU-chained:" in out and "through the host:" in out  # main() is 0: detections within 1e-3
