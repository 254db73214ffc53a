"""No dead ends in kernel choice (issue 22, part 1): every decomposable kernel offers, at every size, at least one
decomposition, and every one it offers stays within WebGPU's default limits (256 invocations and 16 KiB of workgroup
memory per workgroup), so the policy always has a choice that runs on any adapter. No GPU needed: kernels never touch
it; each candidate's WGSL is rendered and its workgroup arrays summed.

A fused op (ATTENTION) that cannot take a shape leaves the decomposed ops, with the reason among the graph's remarks
(which `gpuengine inspect` prints), and policy.choose names the problem instead of failing on an empty list.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuengine.errors import UnsupportedOpError
from gpuengine.latency import policy
from gpuengine.latency.target import named
from gpuengine.lowering import codegen
from gpuengine.lowering.kernels import registry, tiling
from gpuengine.lowering.kernels.attention import long_rows
from gpuengine.lowering.kernels.base import Variants
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.model.reader import read_model
from gpuengine.passes.pipeline import run_passes
from gpuengine.zoo.vit import layer_norm, rms_norm

SIZES = (64, 128, 256, 1000, 2048)  # channels / reduction lengths swept (head dims, widths, vocabulary slices)
LIMIT_BYTES = tiling.LANE_MEMORY_VEC4 * 16
TARGETS = ("cpu", "integrated", "discrete")


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, 0.01, np.float32)  # values do not matter: only the kernels' structure is checked


def fully_connected(c: int) -> bytes:
    mb = ModelBuilder()
    one, rows = mb.input("one", (1, c)), mb.input("rows", (32, c))
    mb.output(mb.op("FULLY_CONNECTED", [one, mb.const("w", _weights((64, c))), -1], (1, 64)),
              mb.op("FULLY_CONNECTED", [rows, mb.const("w2", _weights((1000, c))), -1], (32, 1000)))
    return mb.build()


def batch_matmul(c: int) -> bytes:
    mb = ModelBuilder()
    a, b = mb.input("a", (2, 5, c)), mb.input("b", (2, 7, c))
    mb.output(mb.op("BATCH_MATMUL", [a, b], (2, 5, 7), {"adj_y": True}),
              mb.op("BATCH_MATMUL", [mb.input("p", (3, 1, 9)), mb.input("v", (3, 9, c))], (3, 1, c)))
    return mb.build()


def conv(c: int) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 5, c))
    one = mb.op("CONV_2D", [x, mb.const("w1", _weights((64, 1, 1, c))), mb.const("b1", _weights((64,)))],
                (1, 6, 5, 64), {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    three = mb.op("CONV_2D", [x, mb.const("w3", _weights((16, 3, 3, c))), mb.const("b3", _weights((16,)))],
                  (1, 6, 5, 16), {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    dw = mb.op("DEPTHWISE_CONV_2D", [x, mb.const("wd", _weights((1, 3, 3, c))), mb.const("bd", _weights((c,)))],
               (1, 6, 5, c), {"padding": "SAME", "stride_w": 1, "stride_h": 1, "depth_multiplier": 1})
    mb.output(one, three, dw)
    return mb.build()


def reductions(c: int) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 4, c))
    mean = mb.op("MEAN", [x, mb.const("c", np.array([3], np.int32))], (1, 3, 4, 1), {"keep_dims": True})
    total = mb.op("SUM", [x, mb.const("hw", np.array([1, 2], np.int32))], (1, 1, 1, c), {"keep_dims": True})
    top = mb.op("REDUCE_MAX", [x, mb.const("all", np.array([1, 2, 3], np.int32))], (1,), {"keep_dims": False})
    mb.output(mean, total, top)
    return mb.build()


def normalizations(c: int) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 5, c))
    soft = mb.op("SOFTMAX", [x], (1, 5, c), {"beta": 1.0})
    l2 = mb.op("L2_NORMALIZATION", [x], (1, 5, c))
    ln = layer_norm(mb, x, (1, 5, c), "torch", _weights((c,)), _weights((c,)))
    rms = rms_norm(mb, mb.input("y", (1, 5, c)), (1, 5, c), _weights((c,)))
    mb.output(soft, l2, ln, rms)
    return mb.build()


def attention(d: int, n: int, m: int = 1, heads: int = 2, mask: bool = True) -> bytes:
    """BATCH_MATMUL -> MUL -> ADD mask -> SOFTMAX -> BATCH_MATMUL with head dim d, n keys, m queries; K and V
    broadcast over the heads (one KV head: as grouped-query attention with one group)."""
    mb = ModelBuilder()
    q, k, v = mb.input("q", (heads, m, d)), mb.input("k", (1, n, d)), mb.input("v", (1, n, d))
    s = mb.op("BATCH_MATMUL", [q, k], (heads, m, n), {"adj_y": True})
    s = mb.op("MUL", [s, mb.const("scale", np.array([d ** -0.5], np.float32))], (heads, m, n))
    if mask:
        s = mb.op("ADD", [s, mb.input("mask", (1, m, n))], (heads, m, n))
    p = mb.op("SOFTMAX", [s], (heads, m, n), {"beta": 1.0})
    mb.output(mb.op("BATCH_MATMUL", [p, v], (heads, m, d)))
    return mb.build()


def grouped(d: int, n: int, m: int, group: int, kv_heads: int = 2) -> bytes:
    """Grouped-query attention as litert-torch writes it: each K/V head repeated `group` times (RESHAPE ->
    BROADCAST_TO -> RESHAPE) before the matmuls."""
    heads = kv_heads * group
    mb = ModelBuilder()
    q = mb.input("q", (1, heads, m, d))

    def repeated(name: str) -> int:
        t = mb.input(name, (1, kv_heads, n, d))
        t = mb.op("RESHAPE", [t, mb.const(f"{name}1", np.array([1, kv_heads, 1, n, d], np.int32))],
                  (1, kv_heads, 1, n, d))
        t = mb.op("BROADCAST_TO", [t, mb.const(f"{name}g", np.array([1, kv_heads, group, n, d], np.int32))],
                  (1, kv_heads, group, n, d))
        return mb.op("RESHAPE", [t, mb.const(f"{name}h", np.array([1, heads, n, d], np.int32))], (1, heads, n, d))

    k, v = repeated("k"), repeated("v")
    s = mb.op("BATCH_MATMUL", [q, k], (1, heads, m, n), {"adj_y": True})
    p = mb.op("SOFTMAX", [s], (1, heads, m, n), {"beta": d ** -0.5})
    mb.output(mb.op("BATCH_MATMUL", [p, v], (1, heads, m, d)))
    return mb.build()


MODELS = {"fully_connected": fully_connected, "batch_matmul": batch_matmul, "conv": conv,
          "reductions": reductions, "normalizations": normalizations}
DECOMPOSED = {"fully_connected": ["FULLY_CONNECTED"] * 2, "batch_matmul": ["BATCH_MATMUL"] * 2,
              "conv": ["CONV_2D", "CONV_2D", "DEPTHWISE_CONV_2D"], "reductions": ["MEAN", "SUM", "REDUCE_MAX"],
              "normalizations": ["SOFTMAX", "L2_NORMALIZATION", "LAYER_NORM", "RMS_NORM"]}


def _variants(data: bytes) -> list[tuple[str, Variants]]:
    graph = run_passes(read_model(data).main)
    found = []
    for op in graph.ops:
        assert registry.check(op, graph) is None, f"{op.code}: {registry.check(op, graph)}"
        for item in registry.kernel_for(op).build(op, graph):
            if isinstance(item, Variants):
                found.append((op.code, item))
    return found


def _check(code: str, variants: Variants) -> set[str]:
    """Asserts the candidates exist and each fits the default limits; returns the shaders they use."""
    assert variants.candidates, f"{code}: no decomposition of {variants.problem}"
    shaders = set()
    for d in variants.candidates:
        spec = variants.resolve(d)
        invocations = math.prod(spec.workgroup)
        assert invocations <= tiling.MAX_WORKGROUP, f"{code} {d}: {invocations} invocations per workgroup"
        memory = tiling.workgroup_memory_bytes(codegen.render(spec))
        assert memory <= LIMIT_BYTES, f"{code} {d}: {memory} bytes of workgroup memory"
        shaders.add(spec.shader)
    for name in TARGETS:  # and the policy picks one of them on every target class
        assert policy.choose(variants, named(name)) in variants.candidates
    return shaders


@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("family", sorted(MODELS))
def test_every_kernel_offers_a_valid_decomposition(family, c):
    found = _variants(MODELS[family](c))
    assert [code for code, _ in found] == DECOMPOSED[family]
    for code, variants in found:
        _check(code, variants)


@pytest.mark.parametrize("d", (64, 128, 256))
@pytest.mark.parametrize("n,m", [(64, 1), (1000, 1), (2048, 1), (256, 32), (2048, 32)])
def test_attention_offers_a_valid_decomposition(d, n, m):
    found = _variants(attention(d, n, m))
    codes = [code for code, _ in found]
    assert codes == ["ATTENTION"], codes  # fused: no BATCH_MATMUL / SOFTMAX left
    shaders = _check(*found[0])
    # flash-decoding (decode, or few rows over many keys: 2 heads x 32 queries over 2048 keys at head dim >= 128):
    # its subgroup form (key groups of lanes) is a template of its own
    flash = m == 1 or long_rows(2 * m, n, d, d)
    assert flash == (m == 1 or (n == 2048 and d >= 128))
    assert shaders == ({"attention_partials", "attention_lanes"} if flash else {"attention"})
    families = {(dec.tile[0] > 1, dec.tile[1] > 1, dec.split > 1) for dec in found[0][1].candidates}
    if flash:  # flash-decoding: keys split across workgroups, and within them or shared by a KV head's rows
        assert {(False, True, True), (False, True, False), (True, True, False)} <= families
    else:  # prefill: rows sharing K/V through workgroup memory, and rows whose keys are split
        assert (True, False, False) in families and (False, False, True) in families


@pytest.mark.parametrize("group", (2, 3, 8, 16))
@pytest.mark.parametrize("m,n", [(1, 1024), (32, 256)])
def test_grouped_query_attention_reads_kv_heads(group, m, n):
    """1..16 query heads per KV head: one ATTENTION op reading the KV heads (kv_group), no broadcast copies left."""
    graph = run_passes(read_model(grouped(128, n, m, group)).main)
    assert [op.code for op in graph.ops] == ["ATTENTION"], [op.code for op in graph.ops]
    assert graph.ops[0].opt("kv_group") == group
    ((code, variants),) = _variants(grouped(128, n, m, group))
    _check(code, variants)


def test_fused_op_that_cannot_take_a_shape_leaves_the_ops_with_a_reason():
    """Head dim 260 (> MAX_DEPTH): the five ops stay and the graph says why."""
    graph = run_passes(read_model(attention(260, 16)).main)
    codes = [op.code for op in graph.ops]
    assert "ATTENTION" not in codes and codes.count("BATCH_MATMUL") == 2, codes
    assert any("ATTENTION not fused" in r and "260 channels" in r for r in graph.remarks), graph.remarks


def test_choose_names_the_problem_when_nothing_is_offered():
    (_, variants), *_ = _variants(fully_connected(64))
    empty = Variants(variants.problem, [], variants.invocations, variants.active, variants.work, variants.make,
                     variants.macs)
    with pytest.raises(UnsupportedOpError, match="no decomposition of fully_connected"):
        policy.choose(empty, named("discrete"))


def test_tuning_neighbours_fit_too():
    """`gpuengine tune` also tries each choice's neighbours (tiles per workgroup and split halved or doubled): for
    head dim 256, where a split's merge nearly fills workgroup memory, none it tries exceeds the limit."""
    from gpuengine.tuning.search import decomposition_space

    for m in (1, 32):
        (_, variants), = _variants(attention(256, 512, m))
        for subgroups in (False, True):
            ordered, around = decomposition_space(variants, variants.candidates[0], subgroups)
            assert ordered
            for d in ordered:
                for near in around(d):
                    memory = tiling.workgroup_memory_bytes(codegen.render(variants.resolve(near)))
                    assert memory <= LIMIT_BYTES and near.invocations_per_workgroup <= tiling.MAX_WORKGROUP, near


def hybrid_projections(c: int) -> bytes:
    """A one-row RMSNorm + int8 projection (c -> 64, the norm fused as its prologue) and 5 rows of int8 c -> 64."""
    mb = ModelBuilder()
    q = np.ones((64, c), np.int8)
    quant = Quantization(scale=np.full(64, 0.01, np.float32), zero_point=np.zeros(64, np.int64), axis=0)
    one = rms_norm(mb, mb.input("one", (1, c)), (1, c), np.ones(c))
    mb.output(mb.op("FULLY_CONNECTED", [one, mb.const("w", q, np.int8, quant), -1], (1, 64)),
              mb.op("FULLY_CONNECTED", [mb.input("rows", (5, c)), mb.const("w2", q, np.int8, quant), -1], (5, 64)))
    return mb.build()


@pytest.mark.parametrize("c", (64, 2048, 4096))
def test_staged_hybrid_rows_fit_workgroup_memory(c):
    """The hybrid FC's staged-row form (Decomposition.staged) is offered only where every tile shares the rows
    (one row: yes; 5 rows: no) and what it declares (the split's lanes, the row reductions' parts, the quantized
    words; fully_connected.staged_memory, checked against the rendered WGSL) fits 16 KiB."""
    from gpuengine.lowering.kernels.fully_connected import staged_memory

    one, rows = [v for code, v in _variants(hybrid_projections(c)) if code == "FULLY_CONNECTED"]
    for variants in (one, rows):
        _check("FULLY_CONNECTED", variants)
    staged = [d for d in one.candidates if d.staged]
    assert staged and not any(d.staged for d in rows.candidates)
    assert {d.subgroup for d in staged} == {False, True} and {d.wide for d in staged} == {False, True}
    for d in staged:
        source = codegen.render(one.resolve(d))
        assert "row_q" in source
        assert tiling.workgroup_memory_bytes(source) == staged_memory(d, c // 4, 2) <= LIMIT_BYTES
    # every candidate has its staged twin at 64 channels; at 2048 and more (2 KiB of words) not those whose lanes
    # and row reductions (256 invocations through workgroup memory) already fill most of it
    assert (len(staged) == len(one.candidates) - len(staged)) == (c == 64)


def test_tuning_neighbours_keep_the_form():
    """`gpuengine tune`'s neighbours of a staged or wide choice are staged or wide too (the tuner tunes the form
    the policy chose, not its plain twin), and fit the default limits."""
    from gpuengine.tuning.search import decomposition_space

    one, _ = [v for code, v in _variants(hybrid_projections(64)) if code == "FULLY_CONNECTED"]
    for subgroups in (False, True):
        ordered, around = decomposition_space(one, one.candidates[0], subgroups)
        formed = [d for d in ordered if d.staged or d.wide]
        assert formed
        for d in formed:
            for near in around(d):
                assert (near.staged, near.wide) == (d.staged, d.wide), (d, near)
                memory = tiling.workgroup_memory_bytes(codegen.render(one.resolve(near)))
                assert memory <= LIMIT_BYTES and near.invocations_per_workgroup <= tiling.MAX_WORKGROUP, near


def test_staged_offer_rule():
    """staged_offered: rows within one row tile, a power-of-two workgroup, 16 KiB, a row reduction to share."""
    from gpuengine.lowering.kernels.base import Decomposition
    from gpuengine.lowering.kernels.fully_connected import staged_offered

    d = Decomposition((1, 2), 16, 4, True)
    assert staged_offered(d, 1, 144, False, 2)
    assert not staged_offered(d, 2, 144, False, 2)  # rows beyond the tile: tiles read different rows
    assert staged_offered(d, 1, 144, True, 1)  # float arithmetic: the normalized row (a norm prologue)
    assert not staged_offered(d, 1, 144, True, 0)  # a plain float row: nothing to stage
    assert not staged_offered(d, 1, 1024, True, 1)  # 16 KiB of f32 values
    assert not staged_offered(d, 1, 4096, False, 2)  # 16 KiB of words
    assert staged_offered(Decomposition((2, 1), 8, 8, False), 2, 144, False, 3)
    assert not staged_offered(Decomposition((1, 1), 1, 3, False), 1, 144, False, 1)
    staged = Decomposition((1, 2), 16, 4, True, True, True)  # a tuning cache keeps the form
    assert Decomposition.from_json(staged.to_json()) == staged and "row staged" in staged.describe()
