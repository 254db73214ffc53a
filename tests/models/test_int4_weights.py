"""int4 weights stay packed on the GPU (issue 22, part 3): 8 values per u32 with their scales beside them.

Two forms LiteRT 2.3 runs, both written by ai-edge-quantizer (litert-torch's quantizer): INT4 tensors (two values a
byte, low nibble first) with a symmetric scale per output channel, and blockwise INT4 (the schema's
BlockwiseQuantization: a float16 scale per block of 32 / 128 values along a row, in a tensor of its own; the
`dynamic_int4_block32/128` recipes). A hybrid FULLY_CONNECTED computes what LiteRT's XNNPACK computes (rows quantized
to int8, integer dot products; blockwise: each block's sum times its scale), so the outputs equal LiteRT's; an
EMBEDDING_LOOKUP table is read packed and scaled in the kernel. One model holds every case (one compile, one LiteRT
run).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from builders import block_int4, channel_int4, int4_model
from helpers import SHARED_MODELS, decode_feeds

from gpuengine import Interpreter
from gpuengine.lowering.kernels import packed_int8
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.quantization import INT4, int8_values
from gpuengine.model.reader import read_model
from gpuengine.oracle import relative_error, run_litert


@pytest.fixture(scope="module")
def compiled_int4():
    data, feeds, names = int4_model()
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return data, feeds, names, it


def test_int4_forms_round_trip_through_the_builder():
    """The builder writes INT4 bytes and BlockwiseQuantization details; the reader gives them back."""
    data, _, names = int4_model()
    tensors = read_model(data).main.tensors
    odd, b32 = tensors[names["odd"]], tensors[names["block32"]]
    assert odd.type_code == INT4 and np.asarray(odd.data).size == (11 * 37 + 1) // 2
    assert b32.quantization.block_size == 32 and b32.quantization.block_scales.shape == (12, 3)
    assert int8_values(b32).min() >= -8 and int8_values(b32).max() <= 7


def test_int4_model_equals_litert_on_the_gpu_with_weights_packed(compiled_int4):
    """Every op on the GPU, every output within 1e-5 of LiteRT's; the FC weights bound at 4 bits a value."""
    data, feeds, names, it = compiled_int4
    program = it.compiled.gpu_programs[0]
    assert it.compiled.plan.unsupported == {} and len(it.compiled.gpu_programs) == 1
    labels = [d.spec.label for d in program.dispatches]
    assert sum("int4 weights (8 a u32)" in label for label in labels) == 11, labels  # gate and up merged into one
    assert sum("silu(gate) * up" in label and "int4 weights" in label for label in labels) == 2
    assert any("silu(gate) * up" in label and "in blocks of 32" in label for label in labels)
    assert any("in blocks of 128" in label for label in labels)
    assert sum("int4 table read packed" in label for label in labels) == 3  # GATHER + DEQUANTIZE: one dispatch
    assert not any("DEQUANTIZE" in label for label in labels)
    ref = run_litert(data, feeds)
    for t, r in ref.items():
        assert relative_error(it.get_tensor(t), r) <= 1e-5, t
    wide = [b for d in program.dispatches for b in d.spec.bindings
            if b.name == "weights_0" and "512->64" in d.spec.label]
    assert sorted(b.data.nbytes for b in wide) == [64 * 512 // 2] * 2  # int4, 8 a u32, no padding


def test_blockwise_scales_matter(compiled_int4):
    """The check can tell block scales apart: one scale per row (their mean) puts the output far from LiteRT's."""
    data, feeds, names, it = compiled_int4
    tensors = read_model(data).main.tensors
    w = tensors[names["block128"]]
    q = int8_values(w).astype(np.float64)
    x = feeds[tensors.index(next(t for t in tensors if t.name == "block128_x"))]
    exact = x @ (q * np.repeat(w.quantization.block_scales.astype(np.float64), 128, axis=1)).T
    mean = x @ (q * w.quantization.block_scales.astype(np.float64).mean(axis=1, keepdims=True)).T
    out = next(op.outputs[0] for op in read_model(data).main.ops if op.inputs[1] == names["block128"])
    got_error, mean_error = relative_error(it.get_tensor(out), exact), relative_error(mean, exact)
    assert got_error <= 2e-2 and mean_error > 5 * got_error, (got_error, mean_error)  # rows quantized: ~1e-2


def test_int4_weight_bytes_within_5_percent_of_the_file(compiled_int4, tmp_path):
    """The GPU bytes holding constants (inspect's weight_bytes) stay within 1.05x the file's size."""
    data, _, _, it = compiled_int4
    weight_bytes = sum(sum(p.constant_buffers().values()) for p in it.compiled.gpu_programs)
    assert weight_bytes <= 1.05 * len(data), (weight_bytes, len(data))
    int4_values = sum(int(np.prod(t.shape)) for t in read_model(data).main.tensors if t.type_code == INT4)
    assert weight_bytes < int4_values  # below one byte a value: int8 unpacking would not fit


def test_fold_gather_dequantize_only_where_the_gather_has_one_reader():
    """GATHER + DEQUANTIZE of a constant int table become one GATHER with the float output; a gathered tensor that
    something else reads (here a graph output) keeps both ops."""
    from gpuengine.passes.fold_gather_dequantize import fold_gather_dequantize

    rng = np.random.default_rng(5)
    values, quant = channel_int4(rng, 10, 8, per_channel=False)
    for also_output in (False, True):
        mb = ModelBuilder()
        ids = mb.input("ids", (3,), np.int32)
        table = mb.int4_const("table", values, quant)
        picked = mb.op("GATHER", [table, ids], (3, 8), {"axis": 0}, dtype=np.int8)
        mb.tensors[picked] = dataclasses.replace(mb.tensors[picked], quantization=quant, type_code=INT4)
        out = mb.op("DEQUANTIZE", [picked], (3, 8))
        mb.output(*([out, picked] if also_output else [out]))
        after = fold_gather_dequantize(read_model(mb.build()).main)
        codes = [op.code for op in after.ops]
        assert codes == (["GATHER", "DEQUANTIZE"] if also_output else ["GATHER"])
        assert after.ops[0].outputs == ([picked] if also_output else [out])


SMOLLM_INT4 = (SHARED_MODELS / "generated"
               / "smollm_4l_int4_block32_q4_block32_ekv256.tflite")


@pytest.mark.skipif(not SMOLLM_INT4.exists(), reason="litert-torch int4 SmolLM not built "
                    "(../shared/models/make_smollm_4l_int4.py, needs litert-torch)")
def test_litert_torch_int4_block32_decode_equals_litert_with_weights_kept_int4():
    """litert-torch's own dynamic_int4_block32 export (SmolLM-135M cut to 4 layers): the decode signature is one GPU
    partition, its logits equal LiteRT's within 1e-5 of their range, and the GPU holds at most 1.05x the file."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    ref_runner = LiteRT(model_path=str(SMOLLM_INT4)).get_signature_runner("decode")
    feeds = decode_feeds(ref_runner)
    ref = ref_runner(**feeds)
    runner = Interpreter(model_path=str(SMOLLM_INT4)).get_signature_runner("decode")
    got = runner(**feeds)
    compiled = runner.compiled
    assert compiled.plan.unsupported == {} and len(compiled.gpu_programs) == 1
    for name, r in ref.items():
        assert np.abs(got[name] - r).max() <= 1e-5 * (r.max() - r.min()), name
    weight_bytes = sum(sum(p.constant_buffers().values()) for p in compiled.gpu_programs)
    assert weight_bytes <= 1.05 * SMOLLM_INT4.stat().st_size


def test_int4_tables_larger_than_one_binding_are_split(monkeypatch):
    """With the binding limit lowered to 256 bytes, a blockwise int4 FC (37 rows of 64 values: 32 bytes a row) and
    a per-row int4 table are bound as several chunks of rows, the block scales too; results stay LiteRT's."""
    monkeypatch.setattr(packed_int8, "MAX_BINDING_BYTES", 256)
    rng = np.random.default_rng(6)
    mb = ModelBuilder()
    x = mb.input("x", (2, 64))
    ids = mb.input("ids", (2,), np.int32)
    fc = mb.op("FULLY_CONNECTED", [x, mb.int4_const("w", *block_int4(rng, 37, 64, 32)), -1], (2, 37))
    emb = mb.op("EMBEDDING_LOOKUP", [ids, mb.int4_const("t", *channel_int4(rng, 37, 64))], (2, 64))
    mb.output(fc, emb)
    data = mb.build()
    feeds = {x: rng.standard_normal((2, 64)).astype(np.float32), ids: np.array([36, 17], np.int32)}
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    names = [[b.name for b in d.spec.bindings] for d in it.compiled.gpu_programs[0].dispatches]
    fc_names = next(n for n in names if "weights_0" in n)
    assert "weights_2" in fc_names and "weights_bs_0" in fc_names  # 37 rows of 32 bytes in chunks of 8 rows
    assert any("table_2" in n for n in names)
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    for t, r in ref.items():
        assert relative_error(it.get_tensor(t), r) <= 1e-5, t


def test_int4_table_with_odd_rows_reads_the_schemas_values():
    """Rows of odd length share a byte with the next row (INT4 is packed flat over the tensor). The GPU gives each
    row its own values; LiteRT 2.3's EMBEDDING_LOOKUP starts an odd row one nibble early (it computes the row's
    byte as row * D / 2), so here the reference is the schema's definition, not LiteRT."""
    rng = np.random.default_rng(7)
    values, quant = channel_int4(rng, 7, 5)
    mb = ModelBuilder()
    ids = mb.input("ids", (3,), np.int32)
    out = mb.op("EMBEDDING_LOOKUP", [ids, mb.int4_const("t", values, quant)], (3, 5))
    mb.output(out)
    it = Interpreter(model_content=mb.build())
    it.allocate_tensors()
    it.set_tensor(ids, np.array([6, 1, 3], np.int32))
    it.invoke()
    rows = [6, 1, 3]
    assert relative_error(it.get_tensor(out), values[rows] * quant.scale[rows, None]) <= 1e-7
