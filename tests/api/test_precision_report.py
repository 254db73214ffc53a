"""`gpuengine precision` (tools/precision.py) on the zoo's tiny model and a small int8 model."""

from __future__ import annotations

import json

import numpy as np
from gpuengine.tools.cli import main
from gpuengine.tools.precision import classifier_outputs, is_quantized

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization


def test_precision_report_on_tiny(capsys):
    assert main(["precision", "tiny", "--seeds", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["tiny"]
    assert report["seeds"] == 2 and not report["quantized"] and report["classifier_outputs"]
    assert report["litert_vs_float64"] < 1e-5  # LiteRT's f32 kernels round like any f32 engine
    f32, f16 = report["precisions"]["fp32"], report["precisions"]["fp16"]
    assert f32["precision_in_effect"] == "fp32" and f32["err_vs_litert"] < 1e-5 and f32["err_vs_float64"] < 1e-5
    assert f16["precision_in_effect"] == "fp16" and 1e-6 < f16["err_vs_float64"] < 1e-2
    assert f32["argmax_vs_litert"] == f32["argmax_vs_float64"] == 2 and f16["argmax_vs_litert"] == 2
    assert f32["memory_vs_fp32"] == 1.0 and f16["memory_bytes"] <= 0.55 * f32["memory_bytes"]
    assert f32["ops_on_cpu"] == f16["ops_on_cpu"] == 0


def test_precision_table_and_options(capsys):
    assert main(["precision", "tiny", "--seeds", "1", "--precision", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "| model | precision |" in out and "| tiny | fp32 |" in out and "fp16" not in out


def _int8_model() -> bytes:
    """int8 input -> DEQUANTIZE -> FULLY_CONNECTED -> SOFTMAX -> QUANTIZE -> int8 output."""
    mb = ModelBuilder()
    rng = np.random.default_rng(0)
    q_in = Quantization(np.array([1 / 127], np.float32), np.array([0], np.int64))
    q_out = Quantization(np.array([1 / 256], np.float32), np.array([-128], np.int64))
    x = mb.input("x", (1, 16), np.int8)
    mb.tensors[x].quantization = q_in
    xf = mb.op("DEQUANTIZE", [x], (1, 16))
    w = mb.const("w", rng.normal(0, 1, (10, 16)).astype(np.float32))
    b = mb.const("b", np.zeros(10, np.float32))
    logits = mb.op("FULLY_CONNECTED", [xf, w, b], (1, 10))
    probs = mb.op("SOFTMAX", [logits], (1, 10), {"beta": 1.0})
    out = mb.op("QUANTIZE", [probs], (1, 10), dtype=np.int8)
    mb.tensors[out].quantization = q_out
    mb.output(out)
    return mb.build()


def test_quantized_model_reports_steps(capsys, tmp_path):
    model = _int8_model()
    from gpuengine.model.reader import read_model

    graph = read_model(model).main
    assert is_quantized(graph) and classifier_outputs(graph) == graph.outputs
    path = tmp_path / "int8.tflite"
    path.write_bytes(model)
    assert main(["precision", str(path), "--seeds", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["int8"]
    assert set(report["precisions"]) == {"int8/fp32", "int8/fp16"}
    row = report["precisions"]["int8/fp32"]
    assert row["steps_vs_litert"]["within_2"] >= 0.99 and row["argmax_vs_litert"] == 3
    assert row["err_vs_float64"] < 0.05  # the output grid's step is 1/256
