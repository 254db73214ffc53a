"""Hybrid FULLY_CONNECTED in float arithmetic (issue 22): engine option hybrid_arithmetic="float".

The int8 weights stay packed int8 on the GPU and are unpacked in registers; the float activations are not
quantized and the sums are f32, so the result is the float64 answer x · dequant(W) up to f32 rounding, where LiteRT
(and the default integer arithmetic, which equals it: tests/test_int8_weights.py) adds the error of quantizing each
activation row to int8. Measured on these models (dev box, lavapipe): float arithmetic 3e-8..1.3e-7 from float64,
LiteRT 2.4e-3..8.8e-3.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from builders import gated_mlp, hybrid_fcs, int4_model, int8_weights
from helpers import run

from gpuengine import Interpreter
from gpuengine.lowering.kernels import packed_int8
from gpuengine.lowering.kernels.fully_connected import HYBRID, HYBRID_FLOAT
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ops import HYBRID_ARITHMETIC
from gpuengine.model.reader import read_model
from gpuengine.oracle import relative_error, run_litert
from gpuengine.passes.pipeline import run_passes
from gpuengine.reference import run_reference

FLOAT_BOUND = 1e-6  # f32 rounding of K <= 576 products (measured <= 1.3e-7)
FP16_BOUND = 1e-3  # fp16: rows and results stored as f16, sums in f32 (measured <= 3.4e-4)
LITERT_AT_LEAST = 1e-3  # LiteRT's row quantization on the same ops (measured >= 2.4e-3): the bound is far below it


def fc_labels(it: Interpreter) -> list[str]:
    return [d.spec.label for p in it.compiled.gpu_programs for d in p.dispatches if "FULLY_CONNECTED" in d.spec.label]


@pytest.fixture(scope="module")
def fcs():
    """The hybrid FCs of test_int8_weights (odd K, K not a multiple of 4, rows of several pixels, per-tensor scales,
    RELU / RELU6, no bias), their inputs, and the float64 and LiteRT answers."""
    data, inputs = hybrid_fcs()
    rng = np.random.default_rng(2)
    feeds = {t: (rng.standard_normal(shape) + 0.4).astype(np.float32)
             for t, shape in zip(inputs, [(3, 37), (1, 576), (5, 64), (2, 3, 5), (1, 1, 6)])}
    return data, feeds, run_reference(data, feeds), run_litert(data, feeds)


def test_float_arithmetic_is_the_float64_answer_with_weights_kept_int8(fcs):
    data, feeds, exact, litert = fcs
    it = Interpreter(model_content=data, hybrid_arithmetic="float")
    it.allocate_tensors()
    labels = fc_labels(it)
    assert len(labels) == 5 and all(HYBRID_FLOAT in s for s in labels), labels
    assert all(d.spec.shader == "fully_connected_int8" for d in it.compiled.gpu_programs[0].dispatches
               if "FULLY_CONNECTED" in d.spec.label)
    got = run(it, feeds)
    for t, r in exact.items():
        ours, theirs = relative_error(got[t], r), relative_error(litert[t], r)
        assert ours <= FLOAT_BOUND and theirs >= LITERT_AT_LEAST, (t, ours, theirs)
    # the same constant bytes as the integer arithmetic: int8 weights, 3 floats per output channel
    integer = Interpreter(model_content=data)
    integer.allocate_tensors()
    assert all(HYBRID in s for s in fc_labels(integer))
    assert (sum(it.compiled.gpu_programs[0].constant_buffers().values())
            == sum(integer.compiled.gpu_programs[0].constant_buffers().values()))


def test_float_arithmetic_takes_int4_and_blockwise_weights():
    """int4 weights (per channel and in blocks of 32 / 128, gated MLPs merged) in float arithmetic: each weight
    unpacked and times its channel's or its block's scale in registers, so the outputs are the float64 answer
    up to f32 rounding, where LiteRT's are its row quantization away."""
    data, feeds, _ = int4_model()
    it = Interpreter(model_content=data, hybrid_arithmetic="float")
    it.allocate_tensors()
    labels = fc_labels(it)
    assert labels and all("dequantized in registers" in s for s in labels), labels
    assert any("int4 weights (8 a u32) in blocks of 32" in s for s in labels)
    assert any("int4 weights (8 a u32) in blocks of 128" in s for s in labels)
    got = run(it, feeds)
    exact, litert = run_reference(data, feeds), run_litert(data, feeds)
    fc_outputs = [t for t in exact if relative_error(litert[t], exact[t]) >= LITERT_AT_LEAST]
    assert len(fc_outputs) >= 5, "the model's FC outputs show LiteRT's row quantization"
    for t, r in exact.items():  # the lookups are exact in both; the FCs f32-rounded in float arithmetic
        assert relative_error(got[t], r) <= FLOAT_BOUND, (t, relative_error(got[t], r))


def test_float_arithmetic_in_fp16_sums_in_f32(fcs):
    """fp16 mode: the rows and outputs are stored as f16 (half a step of f16 is 2.4e-4 of a value), the sums stay
    f32, so the error is the storage's, still below LiteRT's row quantization."""
    data, feeds, exact, litert = fcs
    it = Interpreter(model_content=data, hybrid_arithmetic="float", precision="fp16")
    it.allocate_tensors()
    if it.compiled.precision != "fp16":
        pytest.skip("the adapter has no shader-f16")
    got = run(it, feeds)
    for t, r in exact.items():
        ours, theirs = relative_error(got[t], r), relative_error(litert[t], r)
        assert ours <= FP16_BOUND < theirs, (t, ours, theirs)


@pytest.mark.parametrize("target", [None, "discrete"])
def test_float_arithmetic_keeps_the_fusions_and_chunked_weights(monkeypatch, target):
    """A gated MLP in float arithmetic: gate and up merged with their RMSNorm prologue and SiLU gating (two
    dispatches in all), the merged weights (32 rows of 24 bytes) bound in chunks of 640 bytes; float64's answer.
    target "discrete": rows split across invocations (the sums combined after the norm's own combination)."""
    monkeypatch.setattr(packed_int8, "MAX_BINDING_BYTES", 640)
    data, x = gated_mlp(hybrid=True, bias=False)
    feeds = {x: (np.random.default_rng(8).standard_normal((3, 24)) * 2).astype(np.float32)}
    it = Interpreter(model_content=data, hybrid_arithmetic="float", target=target)
    it.allocate_tensors()
    dispatches = it.compiled.gpu_programs[0].dispatches
    kernels = [d.spec.shader for d in dispatches]
    assert kernels.count("fully_connected_int8") == 2 and not {"normalization", "elementwise"} & set(kernels)
    assert all(HYBRID_FLOAT in s for s in fc_labels(it))
    assert max(sum(b.name.startswith("weights_") for b in d.spec.bindings) for d in dispatches) == 2
    assert target is None or all("split" in s for s in fc_labels(it))
    exact, litert = run_reference(data, feeds), run_litert(data, feeds)
    got = run(it, feeds)
    for t, r in exact.items():
        ours, theirs = relative_error(got[t], r), relative_error(litert[t], r)
        assert ours <= FLOAT_BOUND and theirs >= LITERT_AT_LEAST, (t, ours, theirs)


def test_the_mark_reaches_merged_projections_and_only_hybrid_ops():
    """passes/hybrid_arithmetic.py marks hybrid FCs before the optional passes: the merged gate/up projection and
    the down projection carry it; float-weight FCs never do; integer arithmetic marks nothing (graph level)."""
    data, _ = gated_mlp(hybrid=True, bias=False)
    graph = run_passes(read_model(data).main, hybrid="float")
    fcs = [op for op in graph.ops if op.code == "FULLY_CONNECTED"]
    assert len(fcs) == 2 and fcs[0].opt("gated") and all(op.opt(HYBRID_ARITHMETIC) == "float" for op in fcs)
    assert not any(op.opt(HYBRID_ARITHMETIC) for op in run_passes(read_model(data).main).ops)
    dense, _ = gated_mlp(hybrid=False, bias=True)
    assert not any(op.opt(HYBRID_ARITHMETIC) for op in run_passes(read_model(dense).main, hybrid="float").ops)


def one_fc() -> bytes:
    q, quant = int8_weights(np.random.default_rng(3), 8, 12)
    mb = ModelBuilder()
    x = mb.input("x", (1, 12))
    mb.output(mb.op("FULLY_CONNECTED", [x, mb.const("w", q, np.int8, quant), -1], (1, 8)))
    return mb.build()


def test_misuse_raises_valueerror_naming_the_choices(monkeypatch):
    data = one_fc()
    with pytest.raises(ValueError, match="hybrid_arithmetic 'fast' is not one of integer, float"):
        Interpreter(model_content=data, hybrid_arithmetic="fast")
    monkeypatch.setenv("GPUENGINE_HYBRID", "int4")
    with pytest.raises(ValueError, match="GPUENGINE_HYBRID"):
        Interpreter(model_content=data)
    with pytest.raises(ValueError, match="not one of integer, float"):
        run_passes(read_model(data).main, hybrid="double")


def test_env_and_inspect_say_which_arithmetic(monkeypatch, capsys, tmp_path):
    """GPUENGINE_HYBRID=float picks it (an argument wins over it); `inspect --hybrid` labels each hybrid op."""
    from gpuengine.tools.cli import main

    data = one_fc()
    monkeypatch.setenv("GPUENGINE_HYBRID", "Float")
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    assert HYBRID_FLOAT in fc_labels(it)[0]
    it = Interpreter(model_content=data, hybrid_arithmetic="integer")
    it.allocate_tensors()
    assert HYBRID in fc_labels(it)[0]
    monkeypatch.delenv("GPUENGINE_HYBRID")
    path = tmp_path / "fc.tflite"
    path.write_bytes(data)
    for arithmetic, label in (("float", HYBRID_FLOAT), ("integer", HYBRID)):
        assert main(["inspect", str(path), "--hybrid", arithmetic]) == 0
        assert label in capsys.readouterr().out
    assert main(["inspect", str(path), "--json", "--hybrid", "float"]) == 0
    assert HYBRID_FLOAT in json.dumps(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def test_precision_command_measures_decode_steps_against_float64(capsys):
    """`gpuengine precision --signature decode`: the zoo's int8 decoder through prefill_8 and 3 teacher-forced decode
    steps; float arithmetic is within f32 rounding of the float64 logits, LiteRT (and the integer arithmetic, which
    equals it) carries its row quantization's error (measured 7.6e-3 median over 24 steps)."""
    from gpuengine.tools.cli import main

    assert main(["precision", "decoder_tiny", "--signature", "decode", "--steps", "3", "--precision", "fp32",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["decoder_tiny"]
    assert report["prefill"] == "prefill_8" and report["steps"] == 3 and report["prompt_tokens"] == 5
    rows = report["engines"]
    assert set(rows) == {"LiteRT (XNNPACK)", "LiteRT (builtin kernels)", "gpuengine fp32 integer",
                         "gpuengine fp32 float"}
    litert, integer, floating = rows["LiteRT (XNNPACK)"], rows["gpuengine fp32 integer"], rows["gpuengine fp32 float"]
    assert floating["vs_float64"]["max"] < 1e-5 < 1e-3 < litert["vs_float64"]["max"]
    assert integer["vs_litert"]["max"] < 1e-5 and floating["argmax_as_float64"] == 3
    assert len(floating["per_step_vs_float64"]) == 3
