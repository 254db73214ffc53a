"""A decode step's KV cache written in place and read by attention without copies (passes/fold_attention_operands.py,
passes/kv_cache_in_place.py, lowering/kernels/kv_cache.py), on a small grouped-query decode step written as litert-torch
writes one, and on the shared litert-torch models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import SHARED_MODELS

from gpuengine.lowering.layout import stored_as_bhwc
from gpuengine.model.builder import ModelBuilder
from gpuengine.oracle import range_error
from gpuengine.passes import pipeline
from gpuengine.passes.fold_attention_operands import fold_attention_operands
from gpuengine.passes.kv_cache_in_place import kv_cache_in_place
from gpuengine.passes.pipeline import run_passes

SHARED = SHARED_MODELS
T, KV_HEADS, GROUP, DIM = 16, 2, 2, 64  # cache length, KV heads, query heads per KV head, head dim


def rotary(mb: ModelBuilder, x: int, shape: tuple[int, ...], cos: int, sin: int) -> int:
    """litert-torch's rotary embedding over the last axis: two SLICEs, four MULs, SUB, ADD, CONCATENATION."""
    half = shape[-1] // 2
    size = mb.const(f"size{x}", np.array([*shape[:-1], half], np.int32))
    x1 = mb.op("SLICE", [x, mb.const(f"b1{x}", np.zeros(len(shape), np.int32)), size], (*shape[:-1], half))
    x2 = mb.op("SLICE", [x, mb.const(f"b2{x}", np.array([0] * (len(shape) - 1) + [half], np.int32)), size],
               (*shape[:-1], half))
    lo = mb.op("SUB", [mb.op("MUL", [x1, cos], (*shape[:-1], half)), mb.op("MUL", [x2, sin], (*shape[:-1], half))],
               (*shape[:-1], half))
    hi = mb.op("ADD", [mb.op("MUL", [x2, cos], (*shape[:-1], half)), mb.op("MUL", [sin, x1], (*shape[:-1], half))],
               (*shape[:-1], half))
    return mb.op("CONCATENATION", [lo, hi], shape, {"axis": -1})


def decode_step(kv_read_elsewhere: bool = False, rope: bool = False) -> bytes:
    """One decode step's attention over a BTNH cache: DUS writes of K and V, TRANSPOSE, RESHAPE + BROADCAST_TO +
    RESHAPE (grouped-query), the scale split as scalar MULs on Q and K, QK^T (adj_y), mask ADD, SOFTMAX, ·V.
    Inputs q, k_new, v_new, k_cache, v_cache, start (int32 [4]), mask[, cos, sin: q and k_new rotated first];
    outputs attention, k_cache', v_cache'."""
    heads = KV_HEADS * GROUP
    mb = ModelBuilder()
    q = mb.input("q", (1, 1, heads, DIM))
    k_new, v_new = mb.input("k_new", (1, 1, KV_HEADS, DIM)), mb.input("v_new", (1, 1, KV_HEADS, DIM))
    k_cache, v_cache = mb.input("k_cache", (1, T, KV_HEADS, DIM)), mb.input("v_cache", (1, T, KV_HEADS, DIM))
    start = mb.input("start", (4,), np.int32)
    mask = mb.input("mask", (1, 1, 1, T))
    perm = mb.const("perm", np.array([0, 2, 1, 3], np.int32))
    scale = mb.const("scale", np.array(DIM ** -0.25, np.float32))
    if rope:
        cos, sin = mb.input("cos", (1, 1, DIM // 2)), mb.input("sin", (1, 1, DIM // 2))
        q = rotary(mb, q, (1, 1, heads, DIM), cos, sin)
        k_new = rotary(mb, k_new, (1, 1, KV_HEADS, DIM), cos, sin)

    def grouped(cache: int, tag: str) -> int:
        x = mb.op("TRANSPOSE", [cache, perm], (1, KV_HEADS, T, DIM))
        x = mb.op("RESHAPE", [x, mb.const(f"s1{tag}", np.array([KV_HEADS, 1, T, DIM], np.int32))],
                  (KV_HEADS, 1, T, DIM))
        x = mb.op("BROADCAST_TO", [x, mb.const(f"s2{tag}", np.array([KV_HEADS, GROUP, T, DIM], np.int32))],
                  (KV_HEADS, GROUP, T, DIM))
        return mb.op("RESHAPE", [x, mb.const(f"s3{tag}", np.array([1, heads, T, DIM], np.int32))], (1, heads, T, DIM))

    k_out = mb.op("DYNAMIC_UPDATE_SLICE", [k_cache, k_new, start], (1, T, KV_HEADS, DIM))
    v_out = mb.op("DYNAMIC_UPDATE_SLICE", [v_cache, v_new, start], (1, T, KV_HEADS, DIM))
    k = mb.op("MUL", [grouped(k_out, "k"), scale], (1, heads, T, DIM))
    v = grouped(v_out, "v")
    qt = mb.op("MUL", [mb.op("TRANSPOSE", [q, perm], (1, heads, 1, DIM)), scale], (1, heads, 1, DIM))
    s = mb.op("BATCH_MATMUL", [qt, k], (1, heads, 1, T), {"adj_y": True})
    p = mb.op("SOFTMAX", [mb.op("ADD", [s, mask], (1, heads, 1, T))], (1, heads, 1, T), {"beta": 1.0})
    out = mb.op("BATCH_MATMUL", [p, v], (1, heads, 1, DIM))
    mb.output(out, k_out, v_out)
    if kv_read_elsewhere:  # the old cache is read by another op too: no write in place
        mb.output(mb.op("ADD", [k_cache, k_cache], (1, T, KV_HEADS, DIM)))
    return mb.build()


def feeds(rng: np.random.Generator, position: int, rope: bool = False) -> list[np.ndarray]:
    heads = KV_HEADS * GROUP
    mask = np.where(np.arange(T) <= position, 0.0, -1e9).astype(np.float32).reshape(1, 1, 1, T)
    angles = position * 10000.0 ** (-np.arange(DIM // 2) / (DIM // 2))
    tables = [np.cos(angles).astype(np.float32).reshape(1, 1, -1), np.sin(angles).astype(np.float32).reshape(1, 1, -1)]
    return [rng.standard_normal((1, 1, heads, DIM)).astype(np.float32),
            rng.standard_normal((1, 1, KV_HEADS, DIM)).astype(np.float32),
            rng.standard_normal((1, 1, KV_HEADS, DIM)).astype(np.float32),
            rng.standard_normal((1, T, KV_HEADS, DIM)).astype(np.float32),
            rng.standard_normal((1, T, KV_HEADS, DIM)).astype(np.float32),
            np.array([0, position, 0, 0], np.int32), mask, *(tables if rope else [])]


def optimized(model: bytes):
    from gpuengine.model.reader import read_model

    m = read_model(model)
    return run_passes(m.main, True, m)


def test_passes_leave_one_cache_write_and_one_attention():
    codes = [op.code for op in optimized(decode_step()).ops]
    assert codes == ["KV_CACHE_WRITE", "ATTENTION"]  # K and V written by one op (same offsets)
    assert len(optimized(decode_step()).ops[0].outputs) == 2
    attention = optimized(decode_step()).ops[-1]
    # the flat storage step, then TRANSPOSE, RESHAPE, BROADCAST, RESHAPE and the matmul's own K view
    assert [s.kind for s in attention.opt("view_k")][:5] == ["RESHAPE", "TRANSPOSE", "RESHAPE", "BROADCAST", "RESHAPE"]
    assert attention.opt("view_k")[0].in_shape == (T * KV_HEADS, DIM)
    assert attention.opt("scale") == pytest.approx(DIM ** -0.5)  # both scalar MULs joined the scale


def test_each_pass_alone():
    from gpuengine.model.reader import read_model

    m = read_model(decode_step())
    before = [p for p in pipeline.OPTIONAL if p not in (fold_attention_operands, kv_cache_in_place)]
    graph = m.main
    for p in pipeline.REQUIRED + before[:before.index(pipeline.fuse_attention) + 1]:
        graph = p(graph)
    assert sorted(op.code for op in graph.ops).count("BROADCAST_TO") == 2
    assert [op.code for op in kv_cache_in_place(graph).ops] == [op.code for op in graph.ops]  # no views yet: kept
    folded = fold_attention_operands(graph)
    assert [op.code for op in folded.ops] == ["DYNAMIC_UPDATE_SLICE", "DYNAMIC_UPDATE_SLICE", "ATTENTION"]
    assert [op.code for op in kv_cache_in_place(folded).ops] == ["KV_CACHE_WRITE", "ATTENTION"]


def test_rotary_pattern_becomes_rope_and_joins_the_key_write():
    graph = optimized(decode_step(rope=True))
    assert [op.code for op in graph.ops] == ["KV_CACHE_WRITE", "ATTENTION"]
    (k_count, _, k_rope), (v_count, _, v_rope), (q_count, _, q_rope, kind) = graph.ops[0].opt("groups")
    assert (k_count, k_rope, v_count, v_rope) == (5, True, 3, False)  # k_new rotated as it is stored
    assert (q_count, q_rope, kind) == (3, True, "query")  # and q rotated in the same dispatch
    assert graph.ops[1].inputs[0] == graph.ops[0].outputs[2]


def test_fuse_rope_alone_matches_litert():
    """A rotation with per-row tables (prefill: one angle per position) over a tensor sliced from a wider one (the
    fused QKV projection's output): one ROPE dispatch reading the wide tensor through its view."""
    from helpers import assert_matches_litert

    mb = ModelBuilder()
    qkv = mb.input("qkv", (1, 4, 3 * 16))
    part = mb.op("SLICE", [qkv, mb.const("b", np.array([0, 0, 16], np.int32)),
                           mb.const("s", np.array([1, 4, 16], np.int32))], (1, 4, 16))
    cos, sin = mb.input("cos", (1, 4, 8)), mb.input("sin", (1, 4, 8))
    mb.output(rotary(mb, part, (1, 4, 16), cos, sin))
    model = mb.build()
    assert [op.code for op in optimized(model).ops] == ["ROPE"]
    it = assert_matches_litert(model, tol=1e-5)
    assert [d.spec.shader for d in it.compiled.gpu_programs[0].dispatches].count("rope") == 1


@pytest.mark.parametrize("norm_read_elsewhere", [False, True])
def test_query_key_norm_joins_the_rope(norm_read_elsewhere: bool):
    """Gemma 3 / Qwen 3: the head-wise RMSNorm between the QKV split and the rotation (SLICE, RESHAPE to heads,
    RMSNorm over the head, rotation) becomes the ROPE's row-norm inputs, one dispatch reading the projection's
    output in place; a norm whose result is also read elsewhere keeps its own op. Both equal LiteRT."""
    from helpers import assert_matches_litert

    from gpuengine.zoo.vit import rms_norm

    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    qkv = mb.input("qkv", (1, 3, 4 * 32))
    part = mb.op("SLICE", [qkv, mb.const("b", np.array([0, 0, 32], np.int32)),
                           mb.const("s", np.array([1, 3, 64], np.int32))], (1, 3, 64))
    heads = mb.op("RESHAPE", [part, mb.const("shape", np.array([1, 3, 2, 32], np.int32))], (1, 3, 2, 32))
    normed = rms_norm(mb, heads, (1, 3, 2, 32), rng.uniform(0.5, 1.5, 32), eps=1e-6, name="qnorm")
    cos, sin = mb.input("cos", (1, 3, 1, 16)), mb.input("sin", (1, 3, 1, 16))
    mb.output(rotary(mb, normed, (1, 3, 2, 32), cos, sin))
    if norm_read_elsewhere:
        mb.output(normed)
    model = mb.build()
    ops = optimized(model).ops
    if norm_read_elsewhere:
        assert [op.code for op in ops][-2:] == ["RMS_NORM", "ROPE"] and len(ops[-1].inputs) == 3
    else:
        assert [op.code for op in ops] == ["ROPE"] and len(ops[0].inputs) == 6  # x, cos, sin, scale, offset, eps
    it = assert_matches_litert(model, tol=1e-5)
    assert [d.spec.shader for d in it.compiled.gpu_programs[0].dispatches].count("normalization") == \
        int(norm_read_elsewhere)


def test_cache_read_elsewhere_keeps_its_copy():
    ops = optimized(decode_step(kv_read_elsewhere=True)).ops
    assert [op.code for op in ops].count("DYNAMIC_UPDATE_SLICE") == 1
    assert [len(op.outputs) for op in ops if op.code == "KV_CACHE_WRITE"] == [1]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "rope"])
def model_pair(request):
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    model = decode_step(rope=request.param)
    ours = Interpreter(model_content=model)
    ours.allocate_tensors()
    theirs = LiteRT(model_content=model)
    theirs.allocate_tensors()
    return ours, theirs, request.param


def _run(it, values: dict[int, np.ndarray]) -> list[np.ndarray]:
    for detail in it.get_input_details():
        if detail["index"] in values:
            it.set_tensor(detail["index"], values[detail["index"]])
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def test_decode_steps_with_the_cache_in_place_match_litert(model_pair):
    """Three steps: the first uploads the caches, later ones bind each cache input to its own output (the same
    buffer: nothing copied, nothing uploaded but q, k, v, start and mask); every output equals LiteRT's."""
    ours, theirs, rope = model_pair
    rng = np.random.default_rng(3)
    index = [d["index"] for d in ours.get_input_details()]
    values = dict(zip(index, feeds(rng, 5, rope)))
    want = _run(theirs, values)
    got = _run(ours, values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    program = ours.compiled.gpu_programs[0]
    # converted: those of q, k, v, start, mask (and cos, sin) whose PHWC4 layout is not their BHWC one (the others
    # are read in their boundary buffers); then the K and V writes (K rotated, and q's ROPE), ATTENTION
    shaders = [d.spec.shader for d in program.dispatches]
    graph = program.graph
    converted = [t for t in program.inputs if t not in program.in_place and t not in program.direct]
    assert converted == [t for t in program.inputs if t not in program.in_place
                         and not stored_as_bhwc(graph.tensors[t].shape)]
    assert 0 < len(converted) < (7 if rope else 5)
    out_converted = [t for t in program.outputs if t not in program.in_place.values() and t not in program.direct]
    n_in, n_out = len(converted), len(out_converted)
    assert shaders[:n_in + 1] == ["bhwc_to_phwc4"] * n_in + ["kv_cache"]
    assert shaders[n_in + 2:] == ["phwc4_to_bhwc"] * n_out
    assert shaders[n_in + 1] in ("attention", "attention_partials", "attention_lanes"), shaders  # the policy's choice
    for cache, out in ((3, 1), (4, 2)):
        out_t = ours.get_output_details()[out]["index"]
        assert program.output_buffer(out_t) is program.input_buffer(index[cache])  # one buffer for both
        ours.set_input_buffer(cache, ours.output_buffer(out))
    caches = want[1:]
    for position in (6, 7):
        step = feeds(rng, position, rope)
        fresh = (0, 1, 2, 5, 6, 7, 8) if rope else (0, 1, 2, 5, 6)
        values = {index[i]: step[i] for i in fresh}
        want = _run(theirs, {**values, index[3]: caches[0], index[4]: caches[1]})
        got = _run(ours, values)
        caches = want[1:]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
        assert set(program.uploaded) == {index[i] for i in fresh}  # the caches stay where they are


def planned_signature(path: Path, key: str) -> list:
    """The dispatches of every GPU partition of a signature, planned without compiling (nothing touches a GPU);
    planned for the cpu class throughout: its fusions too (the latency model's lavapipe description)."""
    from decoder_parity import planned_dispatches

    return planned_dispatches(str(path), key)


@pytest.mark.parametrize("name,key,layers,per_layer", [("smollm_4l_int8.tflite", "decode", 4, 5),
                                                       ("toy_decoder_kv.tflite", "decode", 2, 5)])
def test_decode_step_structure(name: str, key: str, layers: int, per_layer: int):
    """Per layer, from the QKV projection to the attention: the FULLY_CONNECTED whose store writes the K (rotated)
    and V rows into the caches in place and rotates q (kernels/kv_epilogue.py), then ATTENTION (one dispatch either
    way: flash-decoding's last key chunk of a row merges the row); no cache is converted to or from PHWC4 or copied.
    A whole layer: SmolLM's int8 projections take their RMSNorm as a prologue and its gate/up projections are one
    (5 dispatches; 6 with the cache write a dispatch of its own, 7 when flash-decoding merged in a dispatch of its
    own; the latency model predicts the prologues and the epilogue faster on lavapipe, tests/models/
    test_fusion_latency.py); the toy decoder's float projections take theirs the same way (5; 9 when the float FC
    took no prologue and wrote no cache)."""
    if not (SHARED / name).exists():
        pytest.skip(f"{SHARED / name} is absent (the shared test models)")
    # the write offsets (PACK of the position, computed once for every layer) may land inside the first layer
    specs = [s for s in planned_signature(SHARED / name, key) if s.label != "PACK"]
    shaders = [s.shader for s in specs]
    writes = [i for i, s in enumerate(specs) if "KV_CACHE_WRITE" in s.label and "epilogue" in s.label]
    assert len(writes) == layers and "kv_cache" not in shaders
    for i in writes:
        assert shaders[i].startswith("fully_connected"), shaders[i - 3:i + 3]
        assert shaders[i + 1].startswith("attention"), shaders[i - 3:i + 3]
    assert not [s.label for s in specs if "kv_cache" in s.label]  # no converter of a cache
    assert all(s.shader != "copy" for s in specs[writes[0]:writes[-1]])  # no copy dispatch inside the layers
    assert [b - a for a, b in zip(writes, writes[1:])] == [per_layer] * (layers - 1)


def test_smollm_decode_step_matches_litert():
    """One decode step of the litert-torch SmolLM export (head dim 64, 9 query heads on 3 KV heads) against LiteRT.
    The tolerance is that of the hybrid int8 FULLY_CONNECTED as the engine computes it today (weights dequantized,
    float activations; LiteRT quantizes the activations): the passes here change no value (equal to passes off)."""
    path = SHARED / "smollm_4l_int8.tflite"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared test models)")
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    rng = np.random.default_rng(7)
    ours = Interpreter(model_path=str(path)).get_signature_runner("decode")
    feeds = {"tokens": np.array([[1234]], np.int32), "input_pos": np.array([37], np.int32)}
    for name in ours.get_input_details():
        if name.startswith("kv_cache"):
            feeds[name] = (rng.standard_normal((1, 256, 3, 64)) * 0.5).astype(np.float32)
    got = ours(**feeds)
    want = LiteRT(model_path=str(path)).get_signature_runner("decode")(**feeds)
    for name, ref in want.items():
        err = range_error(got[name], ref)
        assert err < 5e-2, (name, err)  # 1e-2 to 3e-2 today, from the hybrid FULLY_CONNECTED alone
    for name in feeds:  # the rows not written are the inputs' own, untouched
        if name.startswith("kv_cache"):
            keep = np.ones(256, bool)
            keep[37] = False
            np.testing.assert_array_equal(got[name][:, keep], feeds[name][:, keep])


def test_profile_signature_reports_a_decode_step(capsys):
    """`gpuengine profile MODEL --signature decode`: one call of the decode loop (the cache bound to its own output
    buffers): per-dispatch GPU times of its dispatches and the host's share of a step."""
    import json

    from gpuengine.tools.cli import main

    path = SHARED / "toy_decoder_kv.tflite"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared test models)")
    assert main(["profile", str(path), "--signature", "decode", "--runs", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["signature"] == "decode"
    kernels = [d["kernel"] for d in report["dispatches"]]
    # each layer's caches written by its QKV projection's store (kernels/kv_epilogue.py), right before its attention
    attentions = [i for i, k in enumerate(kernels) if k.startswith("attention")]
    assert "kv_cache" not in kernels and len(attentions) == 2, kernels
    assert all(kernels[i - 1].startswith("fully_connected") for i in attentions), kernels
    # tokens and positions are read in their boundary buffers (one pixel, C < 4); the logits (150 channels, not a
    # multiple of 4: PHWC4 pads them) are converted
    assert "bhwc_to_phwc4" not in kernels and kernels.count("phwc4_to_bhwc") == 1, kernels
    assert sum(d["ops"][0].startswith("input decode_kv") for d in report["dispatches"]) == 0
    assert report["upload_ms"] >= 0 and report["host_critical_ms"] > 0 and report["end_to_end_ms"] > 0
    # the host's recording of a step, per dispatch (measured here), and its calls: at most 3 a dispatch
    dispatches = len(report["dispatches"])
    assert report["host_record_us_per_dispatch"] == pytest.approx(report["host_encode_ms"] * 1e3 / dispatches)
    assert report["host_record_us_per_dispatch"] > 0 and dispatches <= report["recorded_calls"] <= 3 * dispatches


def decode_step_transposed(k_layout: str) -> bytes:
    """A decode step over caches in litert-torch's transposed layouts: V [B, N, T, H], K [B, N, T, H] ("BNTH") or
    [B, N, H, T] ("BNHT", written one column per step, QK^T without adj_y). Inputs q, k_new, v_new, k_cache, v_cache,
    v_start, mask, k_start; outputs attention, k_cache', v_cache'."""
    heads = KV_HEADS * GROUP
    k_shape = (1, KV_HEADS, DIM, T) if k_layout == "BNHT" else (1, KV_HEADS, T, DIM)
    mb = ModelBuilder()
    q = mb.input("q", (1, heads, 1, DIM))
    k_new = mb.input("k_new", (1, KV_HEADS, DIM, 1) if k_layout == "BNHT" else (1, KV_HEADS, 1, DIM))
    v_new = mb.input("v_new", (1, KV_HEADS, 1, DIM))
    k_cache, v_cache = mb.input("k_cache", k_shape), mb.input("v_cache", (1, KV_HEADS, T, DIM))
    v_start = mb.input("v_start", (4,), np.int32)
    mask = mb.input("mask", (1, 1, 1, T))
    k_start = mb.input("k_start", (4,), np.int32)

    def grouped(x: int, shape: tuple[int, int], tag: str) -> int:
        x = mb.op("RESHAPE", [x, mb.const(f"r1{tag}", np.array([KV_HEADS, 1, *shape], np.int32))],
                  (KV_HEADS, 1, *shape))
        x = mb.op("BROADCAST_TO", [x, mb.const(f"r2{tag}", np.array([KV_HEADS, GROUP, *shape], np.int32))],
                  (KV_HEADS, GROUP, *shape))
        return mb.op("RESHAPE", [x, mb.const(f"r3{tag}", np.array([1, heads, *shape], np.int32))], (1, heads, *shape))

    k_out = mb.op("DYNAMIC_UPDATE_SLICE", [k_cache, k_new, k_start], k_shape)
    v_out = mb.op("DYNAMIC_UPDATE_SLICE", [v_cache, v_new, v_start], (1, KV_HEADS, T, DIM))
    k = grouped(k_out, k_shape[2:], "k")
    s = mb.op("BATCH_MATMUL", [q, k], (1, heads, 1, T), {"adj_y": k_layout != "BNHT"})
    s = mb.op("MUL", [s, mb.const("scale", np.array(DIM ** -0.5, np.float32))], (1, heads, 1, T))
    p = mb.op("SOFTMAX", [mb.op("ADD", [s, mask], (1, heads, 1, T))], (1, heads, 1, T), {"beta": 1.0})
    mb.output(mb.op("BATCH_MATMUL", [p, grouped(v_out, (T, DIM), "v")], (1, heads, 1, DIM)), k_out, v_out)
    return mb.build()


@pytest.mark.parametrize("k_layout", ["BNTH", "BNHT"])
def test_transposed_cache_layouts_in_place_match_litert(k_layout: str):
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    model = decode_step_transposed(k_layout)
    assert [op.code for op in optimized(model).ops].count("DYNAMIC_UPDATE_SLICE") == 0
    ours, theirs = Interpreter(model_content=model), LiteRT(model_content=model)
    ours.allocate_tensors()
    theirs.allocate_tensors()
    index = [d["index"] for d in ours.get_input_details()]
    rng = np.random.default_rng(11)
    caches = None
    for position in (3, 4, 9):
        heads = KV_HEADS * GROUP
        k_new = (1, KV_HEADS, DIM, 1) if k_layout == "BNHT" else (1, KV_HEADS, 1, DIM)
        k_cache = (1, KV_HEADS, DIM, T) if k_layout == "BNHT" else (1, KV_HEADS, T, DIM)
        mask = np.where(np.arange(T) <= position, 0.0, -1e9).astype(np.float32).reshape(1, 1, 1, T)
        fresh = {index[0]: rng.standard_normal((1, heads, 1, DIM)).astype(np.float32),
                 index[1]: rng.standard_normal(k_new).astype(np.float32),
                 index[2]: rng.standard_normal((1, KV_HEADS, 1, DIM)).astype(np.float32),
                 index[5]: np.array([0, 0, position, 0], np.int32), index[6]: mask,
                 index[7]: np.array([0, 0, 0, position] if k_layout == "BNHT" else [0, 0, position, 0], np.int32)}
        if caches is None:
            caches = [rng.standard_normal(k_cache).astype(np.float32),
                      rng.standard_normal((1, KV_HEADS, T, DIM)).astype(np.float32)]
            got = _run(ours, {**fresh, index[3]: caches[0], index[4]: caches[1]})
            ours.set_input_buffer(3, ours.output_buffer(1))
            ours.set_input_buffer(4, ours.output_buffer(2))
        else:
            got = _run(ours, fresh)
        want = _run(theirs, {**fresh, index[3]: caches[0], index[4]: caches[1]})
        caches = want[1:]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    program = ours.compiled.gpu_programs[0]
    assert not [d.spec.label for d in program.dispatches if "cache" in d.spec.label and "PHWC4" in d.spec.label]
