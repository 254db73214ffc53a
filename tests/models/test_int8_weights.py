"""int8 weights stay int8 on the GPU (issue 22, parts 3 and 5).

Hybrid FULLY_CONNECTED (float rows, int8 per-channel weights) computes what LiteRT's default CPU kernels
(XNNPACK) compute: each row quantized to int8 with its own scale and zero point, integer sums, float scaling. The
GPU keeps the weights packed 4 per u32 (lowering/kernels/packed_int8.py); so does an int8 EMBEDDING_LOOKUP table, and a
language model's tied embedding / LM head share one buffer. A constant larger than one storage binding is split
into row chunks (tested with the limit lowered). Compared with LiteRT on small built models and on the litert-torch
SmolLM export in ../shared/models.
"""

from __future__ import annotations

import numpy as np
import pytest
from builders import gated_mlp, hybrid_fcs, int8_weights
from helpers import SHARED_MODELS, decode_feeds, run

from gpuengine import Interpreter
from gpuengine.lowering.kernels import packed_int8
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.model.quantization import INT4
from gpuengine.model.reader import read_model
from gpuengine.oracle import relative_error, run_litert

MODELS = SHARED_MODELS
SMOLLM = MODELS / "smollm_4l_int8.tflite"


def test_hybrid_fully_connected_equals_litert():
    data, inputs = hybrid_fcs()
    rng = np.random.default_rng(2)
    feeds = {t: (rng.standard_normal(shape) + 0.4).astype(np.float32)
             for t, shape in zip(inputs, [(3, 37), (1, 576), (5, 64), (2, 3, 5), (1, 1, 6)])}
    feeds[inputs[-1]][:] = -1.0  # a row of one sign: its zero point is at the end of the int8 range
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    labels = [d.spec.label for p in it.compiled.gpu_programs for d in p.dispatches if "FULLY" in d.spec.label]
    assert len(labels) == 5 and all("int8 weights, activations quantized per row as LiteRT" in s for s in labels)
    got = run(it, feeds)
    for t, r in ref.items():
        # integer sums equal LiteRT's; a float computation of the same weights is ~6e-3 away, a symmetric one ~9e-3
        assert relative_error(got[t], r) <= 1e-5, t


def test_hybrid_fc_keeps_weights_packed():
    """The GPU holds the int8 weights (4 per u32) and 3 floats per output channel, not 4-byte floats per weight."""
    rng = np.random.default_rng(3)
    q, quant = int8_weights(rng, 256, 512)
    mb = ModelBuilder()
    x = mb.input("x", (1, 512))
    mb.output(mb.op("FULLY_CONNECTED", [x, mb.const("w", q, np.int8, quant), -1], (1, 256)))
    it = Interpreter(model_content=mb.build())
    it.allocate_tensors()
    held = sum(it.compiled.gpu_programs[0].constant_buffers().values())
    assert 256 * 512 <= held <= 256 * 512 + 256 * 3 * 4 + 1024


def tied_lm() -> tuple[bytes, int, int]:
    """Token ids -> int8 EMBEDDING_LOOKUP -> hybrid FC over the same table (a tied LM head), as litert-torch's
    SmolLM export does it; V = 23 rows (not a multiple of 4) of D = 48."""
    rng = np.random.default_rng(4)
    q, quant = int8_weights(rng, 23, 48)
    mb = ModelBuilder()
    ids = mb.input("ids", (3,), np.int32)
    table = mb.const("table", q, np.int8, quant)
    emb = mb.op("EMBEDDING_LOOKUP", [ids, table], (3, 48))
    logits = mb.op("FULLY_CONNECTED", [emb, table, -1], (3, 23))
    mb.output(emb, logits)
    return mb.build(), ids, q.nbytes


def test_int8_embedding_equals_litert_in_one_partition_sharing_the_lm_head_buffer():
    data, ids, table_bytes = tied_lm()
    feeds = {ids: np.array([22, 0, 7], np.int32)}
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    assert it.compiled.plan.unsupported == {} and len(it.compiled.gpu_programs) == 1
    got = run(it, feeds)
    for t, r in ref.items():
        assert relative_error(got[t], r) <= 1e-5, t
    buffers = it.compiled.gpu_programs[0].constant_buffers()
    assert table_bytes in buffers.values()  # one packed copy of the table serves both ops
    assert sum(buffers.values()) < 2 * table_bytes


def test_constants_larger_than_one_binding_are_split(monkeypatch):
    """With the binding limit lowered to 640 bytes, the 37-row packed table (40 bytes a row), the FC's f32 weight
    blocks and the int8 and f32 embedding tables are each bound as several chunks; results stay LiteRT's."""
    monkeypatch.setattr(packed_int8, "MAX_BINDING_BYTES", 640)
    rng = np.random.default_rng(5)
    q, quant = int8_weights(rng, 37, 40)
    mb = ModelBuilder()
    x = mb.input("x", (2, 40))
    ids = mb.input("ids", (2,), np.int32)
    hybrid = mb.op("FULLY_CONNECTED", [x, mb.const("w", q, np.int8, quant), -1], (2, 37))
    wf = mb.const("wf", rng.standard_normal((10, 40)).astype(np.float32))
    dense = mb.op("FULLY_CONNECTED", [x, wf, mb.const("bf", np.ones(10, np.float32))], (2, 10))
    emb = mb.op("EMBEDDING_LOOKUP", [ids, mb.const("t", q, np.int8, quant)], (2, 40))
    emb_f32 = mb.op("EMBEDDING_LOOKUP", [ids, mb.const("tf", rng.standard_normal((37, 10)).astype(np.float32))],
                    (2, 10))
    mb.output(hybrid, dense, emb, emb_f32)
    data = mb.build()
    feeds = {x: rng.standard_normal((2, 40)).astype(np.float32), ids: np.array([36, 17], np.int32)}
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    chunks = [(d.spec.shader, sum(b.name.startswith(("weights_", "table_")) and not b.name.endswith("scale")
                                  for b in d.spec.bindings)) for d in it.compiled.gpu_programs[0].dispatches]
    # int8 FC: 37 rows of 40 bytes in chunks of 16; f32 FC: 3 slices of 10 blocks (640 bytes each), a slice a
    # chunk (chunks independent of the tile, so signatures share them); int8 table as the FC's; f32 table: 37 rows
    # of 3 slices (48 bytes) in chunks of 12
    assert ("fully_connected_int8", 3) in chunks and dict(chunks)["fully_connected"] >= 2
    assert ("copy", 3) in chunks and ("copy", 4) in chunks
    got = run(it, feeds)
    for t, r in ref.items():
        assert relative_error(got[t], r) <= 1e-5, t


@pytest.mark.skipif(not SMOLLM.exists(), reason=f"{SMOLLM} is absent")
def test_smollm_int8_decode_equals_litert_with_weights_kept_int8():
    """litert-torch's SmolLM (4 layers, dynamic_int8): the decode signature is one GPU partition, its logits
    equal LiteRT's within 1e-3 of their range, and the GPU holds no more constant bytes than the file."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    ref_runner = LiteRT(model_path=str(SMOLLM)).get_signature_runner("decode")
    feeds = decode_feeds(ref_runner)
    ref = ref_runner(**feeds)
    it = Interpreter(model_path=str(SMOLLM))
    runner = it.get_signature_runner("decode")
    got = runner(**feeds)
    compiled = runner.compiled
    assert compiled.plan.unsupported == {} and len(compiled.gpu_programs) == 1
    for name, r in ref.items():
        assert np.abs(got[name] - r).max() <= 1e-3 * (r.max() - r.min()), name
    assert got["logits"].argmax() == ref["logits"].argmax()
    weight_bytes = sum(sum(p.constant_buffers().values()) for p in compiled.gpu_programs)
    assert weight_bytes <= 1.05 * SMOLLM.stat().st_size


@pytest.mark.parametrize("hybrid,bias,gate_kind", [(True, False, "SILU"), (False, True, "SILU"),
                                                   (True, True, "GELU_TANH")])
def test_gate_and_up_projections_merge_with_their_norm_and_silu_into_one_dispatch(hybrid, bias, gate_kind):
    """merge_gated_projections (int8 or float weights; SiLU or Gemma's GELU-tanh gate), then
    fuse_norm_into_projection (int8 or float weights): the MLP, its RMSNorm included, is two dispatches."""
    from gpuengine.passes.fuse_norm_into_projection import fuse_norm_into_projection
    from gpuengine.passes.fuse_normalization import fuse_normalization
    from gpuengine.passes.merge_gated_projections import merge_gated_projections
    from gpuengine.passes.pipeline import run_passes

    data, x = gated_mlp(hybrid, bias, gate_kind)
    graph = fuse_normalization(run_passes(read_model(data).main, optimize=False))
    merged = merge_gated_projections(graph)
    assert [op.code for op in merged.ops] == ["RMS_NORM", "FULLY_CONNECTED", "FULLY_CONNECTED"]
    assert merged.ops[1].opt("gated") == gate_kind
    normed = fuse_norm_into_projection(merged)
    assert [op.code for op in normed.ops] == ["FULLY_CONNECTED"] * 2
    feeds = {x: (np.random.default_rng(8).standard_normal((3, 24)) * 2).astype(np.float32)}
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    kernels = [d.spec.shader for d in it.compiled.gpu_programs[0].dispatches]
    assert kernels.count("fully_connected_int8" if hybrid else "fully_connected") == 2
    assert "elementwise" not in kernels and "normalization" not in kernels
    got = run(it, feeds)
    for t, r in ref.items():
        assert relative_error(got[t], r) <= 1e-5, t


def test_projection_fusions_leave_shared_tensors_alone():
    """An RMSNorm read by two projections stays its own op; a gate also read elsewhere (a graph output) is not
    merged (graph level, nothing compiled)."""
    from gpuengine.passes.fuse_norm_into_projection import fuse_norm_into_projection
    from gpuengine.passes.fuse_normalization import fuse_normalization
    from gpuengine.passes.merge_gated_projections import merge_gated_projections
    from gpuengine.zoo.vit import rms_norm

    rng = np.random.default_rng(9)
    mb = ModelBuilder()
    x = mb.input("x", (2, 24))
    y = rms_norm(mb, x, (2, 24), rng.uniform(0.5, 1.5, 24))
    fcs = []
    for name in ("gate", "up"):
        q, quant = int8_weights(rng, 8, 24)
        fcs.append(mb.op("FULLY_CONNECTED", [y, mb.const(name, q, np.int8, quant), -1], (2, 8)))
    gate, up = fcs
    silu = mb.op("MUL", [gate, mb.op("LOGISTIC", [gate], (2, 8))], (2, 8))
    mb.output(mb.op("MUL", [silu, up], (2, 8)), gate)
    graph = fuse_normalization(read_model(mb.build()).main)
    assert [op.code for op in graph.ops][0] == "RMS_NORM"
    after = fuse_norm_into_projection(merge_gated_projections(graph))
    assert [op.code for op in after.ops] == [op.code for op in graph.ops]
    assert not any(op.opt("gated") or op.opt("norm") for op in after.ops)


def test_int4_weights_equal_litert():
    """INT4 weights (two a byte, low nibble first) take the int8 kernel, read packed 8 per u32 (tests/
    test_int4_weights.py has the rest); LiteRT quantizes the rows the same way, so the outputs are equal (a float
    computation is ~1e-2 away)."""
    import dataclasses

    rng = np.random.default_rng(10)
    q = rng.integers(-7, 8, (12, 40)).astype(np.int8)
    scale = rng.uniform(0.01, 0.05, 12).astype(np.float32)
    nibbles = q.reshape(-1).astype(np.uint8) & 0xF
    mb = ModelBuilder()
    x = mb.input("x", (2, 40))
    w = mb.const("w", (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8), np.uint8,
                 Quantization(scale=scale, zero_point=np.zeros(12, np.int64), axis=0))
    mb.tensors[w] = dataclasses.replace(mb.tensors[w], shape=(12, 40), type_code=INT4)
    mb.output(mb.op("FULLY_CONNECTED", [x, w, -1], (2, 12)))
    data = mb.build()
    feeds = {x: rng.standard_normal((2, 40)).astype(np.float32)}
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    assert any(d.spec.shader == "fully_connected_int8" for d in it.compiled.gpu_programs[0].dispatches)
    got = run(it, feeds)
    for t, r in ref.items():
        assert relative_error(got[t], r) <= 1e-5, t
        assert relative_error(feeds[x] @ (q * scale[:, None]).T, r) > 1e-3  # the check can tell the two apart


def test_inspect_reports_weight_bytes(capsys, tmp_path):
    """`inspect --json` reports the GPU bytes holding constants: the tied table once (1104 bytes packed) and its
    92 bytes of row scales; the FC's 3 floats per channel are baked into its shader at this size."""
    import json

    from gpuengine.tools.cli import main

    data, _, table_bytes = tied_lm()
    path = tmp_path / "tied.tflite"
    path.write_bytes(data)
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["weight_bytes"] == table_bytes + 23 * 4
