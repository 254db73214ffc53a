"""passes/fuse_kv_write_into_projection.py and lowering/kernels/kv_epilogue.py: a decode step's KV cache write and
query rotation as the QKV projection's epilogue. The scatter (the projection's permuted outputs, each pair of
slices rotated and stored where the table says) is replayed in numpy against the rotary embedding and cache layout
the zoo decoder writes (no GPU); the GPU runs it in tests/models/test_litert_torch_decoders.py and
test_baseline_device.py."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.latency import devices
from gpuengine.lowering import kernels  # noqa: F401 - installs the kernel registry the passes ask
from gpuengine.lowering.kernels import kv_epilogue
from gpuengine.lowering.layout import from_phwc4, slices, to_bhwc
from gpuengine.model.ops import KV_CACHE_WRITE, KV_EPILOGUE
from gpuengine.model.reader import read_model
from gpuengine.passes import kernel_support, pipeline
from gpuengine.passes.fuse_kv_write_into_projection import fuse_kv_write_into_projection
from gpuengine.zoo.decoder import DecoderConfig, decoder

CONFIG = DecoderConfig(layers=2, width=64, heads=4, kv_heads=2, head_dim=16, mlp=64, vocab=32, cache=8, prefill=2)
H100 = devices.built_in("h100")


def before_the_pass(config: DecoderConfig, device=None):
    """The decode graph through every pass up to fuse_kv_write_into_projection."""
    model = read_model(decoder(config, seed=3))
    graph = model.subgraphs[{s.key: s.subgraph for s in model.signatures}["decode"]]
    passes = pipeline.OPTIONAL[:pipeline.OPTIONAL.index(fuse_kv_write_into_projection)]
    for with_model in pipeline.WITH_MODEL:
        graph = with_model(graph, model)
    for p in [*pipeline.REQUIRED, *passes]:
        graph = p(graph, device) if p in pipeline.WITH_DEVICE else p(graph)
    return graph


@pytest.fixture(scope="module")
def tiny():
    return before_the_pass(CONFIG)


def test_every_layer_write_becomes_the_projection_epilogue(tiny):
    after = fuse_kv_write_into_projection(tiny, H100)
    assert not [op for op in after.ops if op.code == KV_CACHE_WRITE]
    fused = [op for op in after.ops if op.opt(KV_EPILOGUE)]
    assert len(fused) == CONFIG.layers
    assert all(kernel_support.check(op, after) is None for op in fused)
    assert len(after.ops) == len(tiny.ops) - CONFIG.layers
    assert any("fused into the FULLY_CONNECTED" in r and "(latency model)" in r for r in after.remarks), after.remarks


def test_the_latency_model_decides(tiny, monkeypatch):
    """Where the fused dispatch is predicted slower than the two, the write stays, and the remark says so."""
    real = kernel_support.op_ns

    def slow_fused(op, graph, device):
        ns, n = real(op, graph, device)
        return (ns + 1e6 if op.opt(KV_EPILOGUE) else ns), n

    monkeypatch.setattr(kernel_support, "op_ns", slow_fused)
    after = fuse_kv_write_into_projection(tiny, H100)
    assert len([op for op in after.ops if op.code == KV_CACHE_WRITE]) == CONFIG.layers
    assert any("kept apart from the FULLY_CONNECTED" in r for r in after.remarks), after.remarks


def test_a_query_key_norm_keeps_the_write_and_says_why():
    graph = before_the_pass(DecoderConfig(layers=1, width=64, heads=2, kv_heads=1, head_dim=16, mlp=64, vocab=32,
                                          cache=8, prefill=2, gemma=True))
    after = fuse_kv_write_into_projection(graph, H100)
    assert [op.code for op in after.ops].count(KV_CACHE_WRITE) == 1
    assert any("kept as its own dispatch" in r and "row norm" in r for r in after.remarks), after.remarks


def rotate_half(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * np.cos(angles) - b * np.sin(angles), b * np.cos(angles) + a * np.sin(angles)], -1)


def test_the_scatter_stores_what_the_write_would(tiny):
    """The projection's outputs permuted, rotated by pairs and stored by the table: the K and V rows in the caches
    at the position (BTNH), the rotated query heads in its PHWC4 tensor (the zoo's QKV row: per KV head, its query
    heads, then K, then V)."""
    c, position = CONFIG, 5
    after = fuse_kv_write_into_projection(tiny)
    op = next(op for op in after.ops if op.opt(KV_EPILOGUE))
    scatter = kv_epilogue.plan(op, after)
    assert not isinstance(scatter, str), scatter
    y = np.random.default_rng(0).standard_normal(len(set(scatter.order[scatter.order >= 0].tolist())))
    slots = np.where(scatter.order >= 0, y[np.maximum(scatter.order, 0)], 0.0).reshape(-1, 2, 4)
    table = kv_epilogue.scatter_function(op, after, scatter)[0].reshape(-1, 4, 4).astype(np.float64)  # as bound
    outputs = [np.full(after.tensors[t].size, np.nan)
               for t, g in zip(op.outputs, scatter.groups)]
    if any(g.query for g in scatter.groups):  # PHWC4 storage of the query, padding lanes included
        q = next(k for k, g in enumerate(scatter.groups) if g.query)
        b, h, w, ch = to_bhwc(tuple(after.tensors[op.outputs[q]].shape))
        outputs[q] = np.full(b * h * w * slices(ch) * 4, np.nan)
    for (lo, hi), (at_lo, at_hi, turns, (g, rotates, _, _)) in zip(slots, table):
        group = scatter.groups[int(g)]
        if rotates:  # angles are the position times the lanes' frequencies
            lo, hi = lo * np.cos(position * turns) - hi * np.sin(position * turns), \
                hi * np.cos(position * turns) + lo * np.sin(position * turns)
        shift = 0 if group.query else position * group.stride
        for at, value in [*zip(at_lo, lo), *zip(at_hi, hi)]:
            if at >= 0:
                assert np.isnan(outputs[int(g)][int(at) + shift]), "a destination written twice"
                outputs[int(g)][int(at) + shift] = value
    d, groups = c.head_dim, c.groups
    inv_freq = c.rope_base ** (-np.arange(0, d, 2) / d)
    rows = y.reshape(c.kv_heads, (groups + 2) * d)  # per KV head: its query heads, K, V
    k_cache, v_cache = (outputs[i].reshape(1, c.cache, c.kv_heads, d) for i in range(2))
    np.testing.assert_allclose(k_cache[0, position], rotate_half(rows[:, groups * d:(groups + 1) * d],
                                                                 position * inv_freq), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(v_cache[0, position], rows[:, (groups + 1) * d:], rtol=0, atol=0)
    assert np.isnan(np.delete(k_cache[0], position, axis=0)).all()  # nothing else of the cache is written
    query = from_phwc4(outputs[2].astype(np.float32), tuple(after.tensors[op.outputs[2]].shape))
    heads = rows[:, :groups * d].reshape(c.heads, d)
    np.testing.assert_allclose(query.reshape(c.heads, d), rotate_half(heads, position * inv_freq), rtol=1e-5,
                               atol=1e-5)


GEMMA = DecoderConfig(layers=2, width=64, heads=2, kv_heads=1, head_dim=16, mlp=64, vocab=32, cache=8, prefill=2,
                      gemma=True)


def gemma_before_residual(device=None):
    """Gemma's decode graph through every pass up to fuse_residual_norm."""
    from gpuengine.passes.fuse_residual_norm import fuse_residual_norm

    model = read_model(decoder(GEMMA, seed=3))
    graph = model.subgraphs[{s.key: s.subgraph for s in model.signatures}["decode"]]
    for with_model in pipeline.WITH_MODEL:
        graph = with_model(graph, model)
    for p in [*pipeline.REQUIRED, *pipeline.OPTIONAL[:pipeline.OPTIONAL.index(fuse_residual_norm)]]:
        graph = p(graph, device) if p in pipeline.WITH_DEVICE else p(graph)
    return graph, fuse_residual_norm


def test_sandwich_norms_become_the_next_projections_prologue():
    """Each post-attention and post-MLP RMSNorm + residual ADD goes into the normed projection reading the sum (the
    gate/up, the next layer's QKV, the LM head), which writes the sum where the next residual ADD reads it."""
    from gpuengine.model.ops import RESIDUAL_NORM, RMS_NORM

    graph, fuse_residual_norm = gemma_before_residual()
    norms = [op for op in graph.ops if op.code == RMS_NORM]
    assert len(norms) == 2 * GEMMA.layers  # the post norms; the pre norms are prologues already
    after = fuse_residual_norm(graph)
    fused = [op for op in after.ops if op.opt(RESIDUAL_NORM)]
    assert len(fused) == 2 * GEMMA.layers and not [op for op in after.ops if op.code == RMS_NORM]
    assert all(kernel_support.check(op, after) is None for op in fused)
    assert [len(op.outputs) for op in fused] == [2] * (2 * GEMMA.layers - 1) + [1]  # the LM head's sum: no reader
    assert len(after.ops) == len(graph.ops) - 4 * GEMMA.layers  # each norm and its ADD


def test_the_latency_model_decides_the_residual_prologue(monkeypatch):
    from gpuengine.model.ops import RESIDUAL_NORM

    graph, fuse_residual_norm = gemma_before_residual(H100)
    real = kernel_support.op_ns
    monkeypatch.setattr(kernel_support, "op_ns", lambda op, g, device: (
        real(op, g, device)[0] + (1e6 if op.opt(RESIDUAL_NORM) else 0.0), 1))
    after = fuse_residual_norm(graph, H100)
    assert not [op for op in after.ops if op.opt(RESIDUAL_NORM)]
    assert any("kept apart from the normed FULLY_CONNECTED" in r for r in after.remarks), after.remarks
