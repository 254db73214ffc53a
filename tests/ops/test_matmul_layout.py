"""RESHAPE / TRANSPOSE beside a BATCH_MATMUL folded into its reads and writes (passes/fold_matmul_layout.py,
lowering/kernels/layout_view.py): no copy dispatch, same results as LiteRT running the layout ops."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert

from gpuengine import Interpreter
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.oracle import relative_error, run_litert


def _shaders(it: Interpreter) -> list[str]:
    return [d.spec.shader for p in it.compiled.gpu_programs for d in p.dispatches]


def _split(mb: ModelBuilder, t: int, tokens: int, heads: int, d: int) -> int:
    r = mb.op("RESHAPE", [t, mb.const("s", np.array([1, tokens, heads, d], np.int32))], (1, tokens, heads, d))
    return mb.op("TRANSPOSE", [r, mb.const("p", np.array([0, 2, 1, 3], np.int32))], (1, heads, tokens, d))


def attention(tokens: int, heads: int, d: int, transpose_k: bool) -> bytes:
    """Q, K, V inputs [1, T, H*D] -> split heads -> softmax(Q K^T) V -> merge heads -> [1, T, H*D] (+ a bias ADD
    that the matmul runs in its epilogue, through the output view)."""
    width = heads * d
    mb = ModelBuilder()
    q, k, v = (mb.input(n, (1, tokens, width)) for n in "qkv")
    qh, kh, vh = (_split(mb, t, tokens, heads, d) for t in (q, k, v))
    s_shape = (1, heads, tokens, tokens)
    if transpose_k:
        kt = mb.op("TRANSPOSE", [kh, mb.const("kt", np.array([0, 1, 3, 2], np.int32))], (1, heads, d, tokens))
        scores = mb.op("BATCH_MATMUL", [qh, kt], s_shape)
    else:
        scores = mb.op("BATCH_MATMUL", [qh, kh], s_shape, {"adj_y": True})
    probs = mb.op("SOFTMAX", [scores], s_shape, {"beta": 0.5})
    ctx = mb.op("BATCH_MATMUL", [probs, vh], (1, heads, tokens, d))
    merged = mb.op("TRANSPOSE", [ctx, mb.const("m", np.array([0, 2, 1, 3], np.int32))], (1, tokens, heads, d))
    out = mb.op("RESHAPE", [merged, mb.const("o", np.array([1, tokens, width], np.int32))], (1, tokens, width))
    bias = mb.const("bias", np.linspace(-1, 1, width).astype(np.float32))
    mb.output(mb.op("ADD", [out, bias], (1, tokens, width)))
    return mb.build()


def _feeds(tokens: int, width: int, n: int = 3) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(tokens + width)
    return {i: rng.normal(0, 1, (1, tokens, width)).astype(np.float32) for i in range(n)}


@pytest.mark.parametrize("transpose_k", [False, True])
@pytest.mark.parametrize("tokens,heads,d", [(16, 4, 8), (7, 2, 12), (5, 3, 6)])
def test_attention_without_copies(tokens, heads, d, transpose_k):
    """One ATTENTION dispatch reading Q, K, V through the head split and writing through the merge."""
    it = assert_matches_litert(attention(tokens, heads, d, transpose_k), _feeds(tokens, heads * d))
    shaders = _shaders(it)
    if not it.compiled.options.optimize:
        assert "copy" in shaders
        return
    labels = [d_.spec.label for p in it.compiled.gpu_programs for d_ in p.dispatches]
    assert shaders.count("attention") == 1 and "batch_matmul" not in shaders and "softmax" not in shaders, labels
    if d % 4:  # head dims of 6: reads per lane; the merge is no vec4 store, so it stays two copies
        assert shaders.count("copy") == 2, labels
        assert any("views q+k+v)" in label for label in labels), labels
    else:  # the bias ADD runs in the attention's epilogue, written through the output view
        assert "copy" not in shaders, labels
        assert any("views q+k+v+out" in label and label.endswith("+ADD") for label in labels), labels


def matmul_pair(scale_op: str | None, mask: tuple[int, ...] | None, beta: float = 1.0) -> bytes:
    """[2, 6, 8] queries, keys, values (rank 3, no views); scores scaled by MUL / DIV or not, masked or not (a
    causal [6, 6] mask of -1e9 above the diagonal, or a [2, 1, 6] key-padding mask)."""
    mb = ModelBuilder()
    q, k, v = (mb.input(n, (2, 6, 8)) for n in "qkv")
    s = mb.op("BATCH_MATMUL", [q, k], (2, 6, 6), {"adj_y": True})
    if scale_op:
        s = mb.op(scale_op, [s, mb.const("c", np.float32(2.5))], (2, 6, 6))
    if mask == (6, 6):
        m = mb.const("mask", np.triu(np.full((6, 6), -1e9, np.float32), 1))
        s = mb.op("ADD", [m, s], (2, 6, 6))
    elif mask:
        m = mb.input("mask", mask)
        s = mb.op("ADD", [s, m], (2, 6, 6))
    p = mb.op("SOFTMAX", [s], (2, 6, 6), {"beta": beta})
    mb.output(mb.op("BATCH_MATMUL", [p, v], (2, 6, 8)))
    return mb.build()


@pytest.mark.parametrize("scale_op,mask,beta", [(None, None, 1.0), ("MUL", None, 1.0), ("DIV", None, 0.5),
                                                ("MUL", (6, 6), 1.0), ("DIV", (2, 1, 6), 2.0)])
def test_scaled_masked_attention(scale_op, mask, beta):
    data = matmul_pair(scale_op, mask, beta)
    inputs = read_model(data).main.inputs
    feeds = {t: np.random.default_rng(t).normal(0, 1, (2, 6, 8)).astype(np.float32) for t in inputs[:3]}
    if mask and mask != (6, 6):
        feeds[inputs[3]] = np.where(np.random.default_rng(9).random(mask) < 0.3, -1e4, 0.0).astype(np.float32)
    it = assert_matches_litert(data, feeds)
    codes = [op.code for op in it.compiled.plan.graph.ops]
    assert codes == (["ATTENTION"] if it.compiled.options.optimize else codes), codes


def test_projections_merge_into_one_matmul():
    """Q, K, V projections of one input: one FULLY_CONNECTED of 3x the outputs, read through slices."""
    tokens, heads, d = 8, 2, 8
    width = heads * d
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", (1, tokens, width))
    outs = []
    for n in "qkv":
        w = mb.const(f"w{n}", (rng.normal(0, 1, (width, width)) / 4).astype(np.float32))
        b = mb.const(f"b{n}", rng.normal(0, 0.1, width).astype(np.float32))
        outs.append(mb.op("FULLY_CONNECTED", [x, w, b], (1, tokens, width), {"keep_num_dims": True}))
    qh, kh, vh = (_split(mb, t, tokens, heads, d) for t in outs)
    s = mb.op("BATCH_MATMUL", [qh, kh], (1, heads, tokens, tokens), {"adj_y": True})
    p = mb.op("SOFTMAX", [s], (1, heads, tokens, tokens), {"beta": 1.0})
    mb.output(mb.op("BATCH_MATMUL", [p, vh], (1, heads, tokens, d)))
    it = assert_matches_litert(mb.build(), _feeds(tokens, width, 1))
    labels = [d_.spec.label for p_ in it.compiled.gpu_programs for d_ in p_.dispatches]
    if it.compiled.options.optimize:
        assert len(labels) == 4, labels  # in, the merged projection, attention, out
        assert any("16->48" in label for label in labels), labels


def test_operand_read_elsewhere_keeps_its_op():
    """The split K is also a graph output: the TRANSPOSE stays (its output is needed), the matmul still matches."""
    mb = ModelBuilder()
    q, k = mb.input("q", (1, 4, 8)), mb.input("k", (1, 4, 8))
    qh, kh = _split(mb, q, 4, 2, 4), _split(mb, k, 4, 2, 4)
    mb.output(mb.op("BATCH_MATMUL", [qh, kh], (1, 2, 4, 4), {"adj_y": True}), kh)
    it = assert_matches_litert(mb.build())
    if it.compiled.options.optimize:
        assert [op.code for op in it.compiled.plan.graph.ops].count("TRANSPOSE") == 1


def test_mask_adding_a_leading_axis():
    """litert-torch's form: scores [H, T, T] + mask [1, 1, T, T] -> [1, H, T, T], SOFTMAX, RESHAPE back to
    [H, T, T] before ·V: one ATTENTION op (the RESHAPE only drops a leading 1)."""
    mb = ModelBuilder()
    q, k, v = (mb.input(n, (4, 6, 8)) for n in "qkv")
    s = mb.op("BATCH_MATMUL", [q, k], (4, 6, 6), {"adj_y": True})
    mask = mb.const("mask", np.triu(np.full((1, 1, 6, 6), -3.0e38, np.float32), 1))
    s = mb.op("ADD", [s, mask], (1, 4, 6, 6))
    p = mb.op("SOFTMAX", [s], (1, 4, 6, 6), {"beta": 1.0})
    p = mb.op("RESHAPE", [p, mb.const("shape", np.array([4, 6, 6], np.int32))], (4, 6, 6))
    mb.output(mb.op("BATCH_MATMUL", [p, v], (4, 6, 8)))
    data = mb.build()
    feeds = {t: np.random.default_rng(t).normal(0, 1, (4, 6, 8)).astype(np.float32) for t in range(3)}
    it = assert_matches_litert(data, feeds)
    if it.compiled.options.optimize:
        assert [op.code for op in it.compiled.plan.graph.ops] == ["ATTENTION"]


@pytest.mark.parametrize("case", ["masked", "long"])
def test_every_attention_decomposition(case):
    """Each key split the ATTENTION kernel offers (the states of split invocations merged through workgroup
    memory; invocations placed by subgroup or not) against LiteRT: 6 keys with a causal mask (splits of 2), and
    64 keys through layout views (splits up to 32, within and across lavapipe's 8-wide subgroups)."""
    data = matmul_pair("MUL", (6, 6)) if case == "masked" else attention(64, 2, 8, True)
    graph = read_model(data).main
    feeds = {t: np.random.default_rng(t).normal(0, 1, graph.tensors[t].shape).astype(np.float32)
             for t in graph.inputs}
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json", optimize=True)
    it.allocate_tensors()
    (prog,) = it.compiled.gpu_programs
    (index,) = [i for i, d in enumerate(prog.dispatches) if d.spec.shader == "attention"]
    candidates = prog.dispatches[index].spec.variants.candidates
    assert max(d.split for d in candidates) == (2 if case == "masked" else 32)
    assert {d.subgroup for d in candidates} == {False, True}
    for d in candidates:
        prog.replace(index, d)
        for t, v in feeds.items():
            it.set_tensor(t, v)
        it.invoke()
        (out,) = it.get_output_details()
        err = relative_error(it.get_tensor(out["index"]), ref[out["index"]])
        assert err <= (1e-2 if it.compiled.precision == "fp16" else 1e-4), f"{d}: {err:.3g}"


def test_long_rows_split_on_a_discrete_target():
    """64 keys per row, 4 heads: a discrete target splits each row's keys over several invocations."""
    data = attention(64, 4, 16, False)
    it = assert_matches_litert(data, _feeds(64, 64), target="discrete")
    if it.compiled.options.optimize:
        (spec,) = [d.spec for p in it.compiled.gpu_programs for d in p.dispatches if d.spec.shader == "attention"]
        assert spec.decomposition.split > 1, spec.label
