"""Fusions that trade a dispatch for recomputation ask the latency model (issue 24, part 3).

passes/fuse_norm_into_projection.py makes an RMSNorm the prologue of the int8 FULLY_CONNECTED reading it: every
tile recomputes its row's normalizer, where one RMS_NORM dispatch writes the row once. The pass fuses where the
latency model predicts the fused FC faster than the two dispatches on the description of the device the plan is
for. On an H100 (a dependent dispatch and its recording cost ~9 us) it fuses every one of SmolLM's; on a GPU whose
dispatches cost nothing (the H100's figures without its fixed costs) only the recomputation is left to weigh, and
the wide gated MLP projections keep their RMS_NORM. Both forms compute what LiteRT computes. Float FCs (f32 decoders)
take the prologue by the same rule: fused, the norm's sums stay f32 in fp16 mode.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from builders import int8_weights
from helpers import FP16_TOLERANCE, SHARED_MODELS

from gpuengine.latency import devices
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ops import GATED_OPTION
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions
from gpuengine.oracle import relative_error, run_litert
from gpuengine.planning import plan_graph
from gpuengine.runtime.graph import CompiledGraph

SMOLLM = SHARED_MODELS / "smollm_4l_int8.tflite"
H100 = devices.built_in("h100")
# a GPU whose dispatches cost nothing: only the recomputation is left to weigh against the second dispatch
FREE_DISPATCHES = dataclasses.replace(H100, name="h100 without fixed costs", dispatch_ns=0.0, record_ns=0.0,
                                      workgroup_ns=0.0)


def norm_users(graph) -> tuple[int, int]:
    """(RMS_NORM ops kept, FULLY_CONNECTED ops with a norm prologue)."""
    return (sum(op.code == "RMS_NORM" for op in graph.ops),
            sum(op.code == "FULLY_CONNECTED" and bool(op.opt("norm")) for op in graph.ops))


def test_smollm_norm_fusion_follows_predicted_time():
    if not SMOLLM.exists():
        pytest.skip(f"{SMOLLM} is absent (the shared test models)")
    model = read_model(str(SMOLLM))
    sig = next(s for s in model.signatures if s.key == "decode")
    graph = model.subgraphs[sig.subgraph]
    on_h100 = plan_graph(graph, EngineOptions(latency_device=H100), model).graph
    # 4 layers x (QKV, gate/up) + the final norm into the LM head
    assert norm_users(on_h100) == (0, 9)
    assert any(r.startswith("RMS_NORM fused into") and "(9x)" in r and "on h100" in r for r in on_h100.remarks)
    free = plan_graph(graph, EngineOptions(latency_device=FREE_DISPATCHES), model).graph
    kept_apart, fused = norm_users(free)
    assert kept_apart + fused == 9 and fused >= 4  # without the barrier's cost the QKV projections still fuse
    gated = [op for op in free.ops if op.code == "FULLY_CONNECTED" and op.opt(GATED_OPTION)]
    assert len(gated) == 4 and not any(op.opt("norm") for op in gated)  # the MLP's 576 -> 2 x 1536 keep theirs
    decisions = [r for r in free.remarks if r.startswith("RMS_NORM")]
    assert any("kept apart" in r for r in decisions)
    for remark in decisions:  # each decision follows its predicted times
        fused_us, apart_us = (float(remark.split("predicted ")[1].split(" us")[0]),
                              float(remark.split(" vs ")[1].split(" us")[0]))
        assert (fused_us < apart_us) if remark.startswith("RMS_NORM fused") else (apart_us <= fused_us), remark


def norm_projection() -> tuple[bytes, int]:
    """RMSNorm (as ops) of one row of 576, then an int8 FULLY_CONNECTED 576 -> 3072 (SmolLM's MLP width)."""
    from gpuengine.zoo.vit import rms_norm

    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = mb.input("x", (1, 576))
    y = rms_norm(mb, x, (1, 576), rng.uniform(0.5, 1.5, 576))
    q, quant = int8_weights(rng, 3072, 576)
    mb.output(mb.op("FULLY_CONNECTED", [y, mb.const("w", q, np.int8, quant), -1], (1, 3072)))
    return mb.build(), x


def test_fused_and_separate_norm_equal_litert():
    data, x = norm_projection()
    feeds = {x: (np.random.default_rng(4).standard_normal((1, 576)) * 2).astype(np.float32)}
    ref = run_litert(data, feeds)
    graph = read_model(data).main
    for device, fused in ((H100, True), (FREE_DISPATCHES, False)):
        compiled = CompiledGraph(graph, EngineOptions(latency_device=device))
        assert norm_users(compiled.graph) == ((0, 1) if fused else (1, 0)), device.name
        kernels = [d.spec.shader for d in compiled.gpu_programs[0].dispatches]
        assert ("normalization" in kernels) != fused and "fully_connected_int8" in kernels, kernels
        got = compiled.run(feeds)
        for t, r in ref.items():
            assert relative_error(got[t], r) <= 1e-5, (device.name, t)


def float_norm_projection(rows: int) -> tuple[bytes, int]:
    """RMSNorm (as ops) of `rows` rows of 576, then a float FULLY_CONNECTED 576 -> 3072 with a bias."""
    from gpuengine.zoo.vit import rms_norm

    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    x = mb.input("x", (rows, 576))
    y = rms_norm(mb, x, (rows, 576), rng.uniform(0.5, 1.5, 576))
    w = mb.const("w", (rng.standard_normal((3072, 576)) / 8).astype(np.float32))
    b = mb.const("b", rng.standard_normal(3072).astype(np.float32))
    mb.output(mb.op("FULLY_CONNECTED", [y, w, b], (rows, 3072)))
    return mb.build(), x


def test_float_projection_takes_the_norm_where_predicted_faster_and_equals_litert():
    """8 rows (a short prefill): on an H100 the fixed cost of the second dispatch outweighs the recomputation, the
    float FC takes the RMSNorm as its prologue; without fixed costs each of its tiles recomputing the 8 rows'
    normalizers costs more, and the norm keeps its dispatch. Both within the float tolerance of LiteRT; fused in fp16
    (rows and weights f16, the norm's sums f32) within the fp16 tolerance."""
    data, x = float_norm_projection(8)
    feeds = {x: (np.random.default_rng(6).standard_normal((8, 576)) * 2).astype(np.float32)}
    ref = run_litert(data, feeds)
    graph = read_model(data).main
    for device, fused, precision in ((H100, True, "fp32"), (FREE_DISPATCHES, False, "fp32"), (H100, True, "fp16")):
        compiled = CompiledGraph(graph, EngineOptions(latency_device=device, precision=precision))
        assert norm_users(compiled.graph) == ((0, 1) if fused else (1, 0)), device.name
        how = "fused into" if fused else "kept apart from"
        assert any(r.startswith(f"RMS_NORM {how}") and f"on {device.name}" in r for r in compiled.graph.remarks)
        specs = [d.spec for d in compiled.gpu_programs[0].dispatches]
        assert [s.shader for s in specs].count("normalization") == (0 if fused else 1)
        assert any(s.shader == "fully_connected" and s.label.startswith("RMS_NORM(") == fused for s in specs)
        tolerance = 1e-5 if precision == "fp32" or compiled.precision != "fp16" else FP16_TOLERANCE
        got = compiled.run(feeds)
        for t, r in ref.items():
            assert relative_error(got[t], r) <= tolerance, (device.name, precision, t, relative_error(got[t], r))
