"""A decode step's KV cache written in place and read by attention without copies (passes/fold_attention_operands.py,
passes/kv_cache_in_place.py, kernels/kv_cache.py), on a small grouped-query decode step written as litert-torch
writes one, and on the shared litert-torch models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuengine.model.builder import ModelBuilder
from gpuengine.passes import pipeline
from gpuengine.passes.fold_attention_operands import fold_attention_operands
from gpuengine.passes.kv_cache_in_place import kv_cache_in_place
from gpuengine.passes.pipeline import run_passes

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"
T, KV_HEADS, GROUP, DIM = 16, 2, 2, 8  # cache length, KV heads, query heads per KV head, head dim


def decode_step(kv_read_elsewhere: bool = False) -> bytes:
    """One decode step's attention over a BTNH cache: DUS writes of K and V, TRANSPOSE, RESHAPE + BROADCAST_TO +
    RESHAPE (grouped-query), the scale split as scalar MULs on Q and K, QK^T (adj_y), mask ADD, SOFTMAX, ·V.
    Inputs q, k_new, v_new, k_cache, v_cache, start (int32 [4]), mask; outputs attention, k_cache', v_cache'."""
    heads = KV_HEADS * GROUP
    mb = ModelBuilder()
    q = mb.input("q", (1, 1, heads, DIM))
    k_new, v_new = mb.input("k_new", (1, 1, KV_HEADS, DIM)), mb.input("v_new", (1, 1, KV_HEADS, DIM))
    k_cache, v_cache = mb.input("k_cache", (1, T, KV_HEADS, DIM)), mb.input("v_cache", (1, T, KV_HEADS, DIM))
    start = mb.input("start", (4,), np.int32)
    mask = mb.input("mask", (1, 1, 1, T))
    perm = mb.const("perm", np.array([0, 2, 1, 3], np.int32))
    scale = mb.const("scale", np.array(DIM ** -0.25, np.float32))

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


def feeds(rng: np.random.Generator, position: int) -> list[np.ndarray]:
    heads = KV_HEADS * GROUP
    mask = np.where(np.arange(T) <= position, 0.0, -1e9).astype(np.float32).reshape(1, 1, 1, T)
    return [rng.standard_normal((1, 1, heads, DIM)).astype(np.float32),
            rng.standard_normal((1, 1, KV_HEADS, DIM)).astype(np.float32),
            rng.standard_normal((1, 1, KV_HEADS, DIM)).astype(np.float32),
            rng.standard_normal((1, T, KV_HEADS, DIM)).astype(np.float32),
            rng.standard_normal((1, T, KV_HEADS, DIM)).astype(np.float32),
            np.array([0, position, 0, 0], np.int32), mask]


def optimized(model: bytes):
    from gpuengine.model.reader import read_model

    m = read_model(model)
    return run_passes(m.main, True, m)


def test_passes_leave_one_cache_write_each_and_one_attention():
    codes = [op.code for op in optimized(decode_step()).ops]
    assert codes == ["KV_CACHE_WRITE", "KV_CACHE_WRITE", "ATTENTION"]
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
    assert [op.code for op in kv_cache_in_place(folded).ops] == ["KV_CACHE_WRITE", "KV_CACHE_WRITE", "ATTENTION"]


def test_cache_read_elsewhere_keeps_its_copy():
    codes = [op.code for op in optimized(decode_step(kv_read_elsewhere=True)).ops]
    assert codes.count("DYNAMIC_UPDATE_SLICE") == 1 and codes.count("KV_CACHE_WRITE") == 1


@pytest.fixture(scope="module")
def model_pair():
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    model = decode_step()
    ours = Interpreter(model_content=model)
    ours.allocate_tensors()
    theirs = LiteRT(model_content=model)
    theirs.allocate_tensors()
    return ours, theirs


def _run(it, values: dict[int, np.ndarray]) -> list[np.ndarray]:
    for detail in it.get_input_details():
        if detail["index"] in values:
            it.set_tensor(detail["index"], values[detail["index"]])
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def test_decode_steps_with_the_cache_in_place_match_litert(model_pair):
    """Three steps: the first uploads the caches, later ones bind each cache input to its own output (the same
    buffer: nothing copied, nothing uploaded but q, k, v, start and mask); every output equals LiteRT's."""
    ours, theirs = model_pair
    rng = np.random.default_rng(3)
    index = [d["index"] for d in ours.get_input_details()]
    values = dict(zip(index, feeds(rng, 5)))
    want = _run(theirs, values)
    got = _run(ours, values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    program = ours.compiled.gpu_programs[0]
    assert [d.spec.shader for d in program.dispatches].count("bhwc_to_phwc4") == 5  # q, k, v, start, mask
    assert [d.spec.shader for d in program.dispatches].count("phwc4_to_bhwc") == 1  # the attention output only
    for cache, out in ((3, 1), (4, 2)):
        out_t = ours.get_output_details()[out]["index"]
        assert program.output_buffer(out_t) is program.input_buffer(index[cache])  # one buffer for both
        ours.set_input_buffer(cache, ours.output_buffer(out))
    caches = want[1:]
    for position in (6, 7):
        step = feeds(rng, position)
        values = {index[i]: step[i] for i in (0, 1, 2, 5, 6)}
        want = _run(theirs, {**values, index[3]: caches[0], index[4]: caches[1]})
        got = _run(ours, values)
        caches = want[1:]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
        assert set(program.uploaded) == {index[i] for i in (0, 1, 2, 5, 6)}  # the caches stay where they are
