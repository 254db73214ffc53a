"""ATTENTION at real sizes against LiteRT (issue 22, part 2): head dims 64 / 128 / 256, grouped-query attention
(K/V heads repeated by RESHAPE -> BROADCAST_TO -> RESHAPE, read natively through kv_group), decode (one query over
hundreds of keys: flash-decoding, keys split across workgroups and merged by a second dispatch) and prefill (32
queries: rows sharing K/V blocks through workgroup memory, or keys split within a workgroup), with and without an
additive mask. Each decomposition family runs at least once (forced with GpuProgram.replace, as
tests/models/test_decompositions.py does). Few distinct shapes: lavapipe compiles each shader in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert

from gpuengine import Interpreter
from gpuengine.model.builder import ModelBuilder
from gpuengine.oracle import relative_error, run_litert

NEG = -3.0e38  # what converters put in a causal mask


def gqa_attention(d: int, kv_heads: int, group: int, m: int, n: int, mask: bool, transpose_k: bool = False) -> bytes:
    """Q [1, H, M, D], K/V [1, Hkv, N, D] (H = Hkv * group; each K/V head repeated `group` times, as litert-torch
    writes GQA), softmax(Q K^T / sqrt(D) [+ mask [1, 1, M, N]]) V -> [1, H, M, D]. transpose_k: K^T by a TRANSPOSE
    (as litert-torch's decode graph has it) instead of the matmul's adj_y."""
    heads = kv_heads * group
    mb = ModelBuilder()
    q = mb.input("q", (1, heads, m, d))
    k, v = mb.input("k", (1, kv_heads, n, d)), mb.input("v", (1, kv_heads, n, d))
    mask_in = mb.input("mask", (1, 1, m, n)) if mask else None

    def repeat(t: int, name: str) -> int:
        if group == 1:
            return t
        r = mb.op("RESHAPE", [t, mb.const(f"{name}/unsqueeze", np.array([1, kv_heads, 1, n, d], np.int32))],
                  (1, kv_heads, 1, n, d))
        b = mb.op("BROADCAST_TO", [r, mb.const(f"{name}/repeat", np.array([1, kv_heads, group, n, d], np.int32))],
                  (1, kv_heads, group, n, d))
        return mb.op("RESHAPE", [b, mb.const(f"{name}/merge", np.array([1, heads, n, d], np.int32))],
                     (1, heads, n, d))

    if transpose_k:
        kt = mb.op("TRANSPOSE", [repeat(k, "k"), mb.const("kt", np.array([0, 1, 3, 2], np.int32))], (1, heads, d, n))
        s = mb.op("BATCH_MATMUL", [q, kt], (1, heads, m, n))
    else:
        s = mb.op("BATCH_MATMUL", [q, repeat(k, "k")], (1, heads, m, n), {"adj_y": True})
    s = mb.op("MUL", [s, mb.const("scale", np.array([d ** -0.5], np.float32))], (1, heads, m, n))
    if mask_in is not None:
        s = mb.op("ADD", [s, mask_in], (1, heads, m, n))
    p = mb.op("SOFTMAX", [s], (1, heads, m, n), {"beta": 1.0})
    mb.output(mb.op("BATCH_MATMUL", [p, repeat(v, "v")], (1, heads, m, d)))
    return mb.build()


def feeds(d: int, kv_heads: int, group: int, m: int, n: int, mask: bool, transpose_k: bool = False,
          ) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(d + n + m + group)
    values = {0: rng.normal(0, 1.5, (1, kv_heads * group, m, d)).astype(np.float32),
              1: rng.normal(0, 1.5, (1, kv_heads, n, d)).astype(np.float32),
              2: rng.normal(0, 1, (1, kv_heads, n, d)).astype(np.float32)}
    if mask:  # causal over a cache: query i (at position n - m + i) sees keys up to its position
        # and the last quarter of the cache is not written yet (every query sees at least key 0: a row of nothing
        # but -3e38 is -inf in fp16, whose softmax is undefined)
        rows = np.maximum(np.arange(m)[:, None] + (n - m) - n // 4, 0)
        values[3] = np.where(np.arange(n)[None, :] <= rows, 0.0, NEG).astype(np.float32).reshape(1, 1, m, n)
    return values


def _attention_dispatches(it: Interpreter) -> list[str]:
    return [d.spec.shader for p in it.compiled.gpu_programs for d in p.dispatches]


# (head dim, KV heads, group, queries, keys, mask[, K transposed]): the policy's choice on this adapter for each
CASES = [(64, 3, 3, 1, 256, True), (128, 1, 8, 1, 1024, False), (256, 2, 1, 1, 512, True, True),
         (64, 3, 3, 32, 32, True), (128, 1, 1, 32, 64, True, True), (256, 1, 8, 32, 48, False)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "d{}-kv{}-g{}-m{}-n{}-{}{}".format(
    *c[:5], "mask" * c[5], "-kt" * (len(c) > 6)))
def test_attention_matches_litert(case):
    it = assert_matches_litert(gqa_attention(*case), feeds(*case))
    if not it.compiled.options.optimize:
        return
    shaders = _attention_dispatches(it)
    assert "batch_matmul" not in shaders and "softmax" not in shaders and "copy" not in shaders, shaders
    (op,) = [o for o in it.compiled.plan.graph.ops if o.code == "ATTENTION"]
    # decode: flash-decoding (its merge in the same dispatch), or one workgroup a row where the latency model
    # predicts it faster on this adapter (passes/choose_attention_split.py)
    flash = case[3] == 1 and not op.opt("one_dispatch")
    # (flash-decoding in either template: key groups of lanes, or its partials form)
    attention = [s for s in shaders if s.startswith("attention")]
    assert attention in ([["attention_lanes"], ["attention_partials"]] if flash else [["attention"]]), attention
    if len(case) > 6:  # K^T through a TRANSPOSE view: the kernel reads K's rows [N, D] instead, whole vec4s
        (spec,) = [d.spec for p in it.compiled.gpu_programs for d in p.dispatches if d.spec.variants is not None]
        assert f"x{(1, case[1], case[4], case[0])}x" in spec.label, spec.label
    # K/V read per KV head, never broadcast (one KV head: through the kernel's batch broadcasting)
    assert (op.opt("kv_group") or 1) == (case[2] if case[1] > 1 else 1)


def _run_each(case: tuple, pick, monkeypatch=None) -> int:
    """Compile once, then swap in each decomposition `pick` selects and compare with LiteRT; returns how many.
    With `monkeypatch`: flash-decoding wherever the kernel uses it (passes/choose_attention_split.py left out)."""
    if monkeypatch is not None:
        from gpuengine.passes import pipeline
        from gpuengine.passes.choose_attention_split import choose_attention_split

        monkeypatch.setattr(pipeline, "OPTIONAL", [p for p in pipeline.OPTIONAL if p is not choose_attention_split])
    data, values = gqa_attention(*case), feeds(*case)
    ref = run_litert(data, values)
    again = run_litert(data, {t: v * np.asarray(0.5, v.dtype) for t, v in values.items()})
    # the fused kernel's decompositions are what is tested: passes on whatever GPUENGINE_OPTIMIZE says
    it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json", optimize=True)
    it.allocate_tensors()
    (prog,) = it.compiled.gpu_programs
    (index,) = [i for i, d in enumerate(prog.dispatches) if d.spec.variants is not None]
    chosen = pick(prog.dispatches[index].spec.variants.candidates)
    (out,) = it.get_output_details()
    for d in chosen:
        prog.replace(index, d)
        for t, v in values.items():
            it.set_tensor(t, v)
        it.invoke()
        err = relative_error(it.get_tensor(out["index"]), ref[out["index"]])
        assert err <= (1e-2 if it.compiled.precision == "fp16" else 1e-4), f"{d}: {err:.3g}"
        # again with other values: flash-decoding's per-row arrival counts are back at zero after a dispatch (its
        # last tile resets them), or no tile would merge and store this time
        for t, v in values.items():
            it.set_tensor(t, v * np.asarray(0.5, v.dtype))
        it.invoke()
        err = relative_error(it.get_tensor(out["index"]), again[out["index"]])
        assert err <= (1e-2 if it.compiled.precision == "fp16" else 1e-4), f"{d} (second invoke): {err:.3g}"
    return len(chosen)


def _first_of_each(candidates, key) -> list:
    seen: dict = {}
    for d in candidates:
        seen.setdefault(key(d), d)
    return list(seen.values())


def test_flash_decoding_families(monkeypatch):
    """Decode, head dim 64, 3 query heads per KV head, 256 keys with a mask: one chunk or many, keys split inside
    the workgroup or not, merged through workgroup memory or placed by subgroup, or the 3 query heads of a KV head
    sharing its keys through workgroup memory."""
    count = _run_each((64, 3, 3, 1, 256, True), lambda cs: _first_of_each(
        cs, lambda d: (d.tile[0] > 1, min(d.tile[1], 2), d.split > 1, d.subgroup)), monkeypatch)
    assert count == 8


def test_prefill_families():
    """Prefill, head dim 64, GQA 3, 32 queries over 32 keys with a causal mask: rows sharing K/V blocks (8 and 32
    rows per workgroup) and one row per tile with its keys split (workgroup memory and subgroup placement)."""
    count = _run_each((64, 3, 3, 32, 32, True), lambda cs: [d for d in cs if d.tile[0] in (8, 32)] + _first_of_each(
        [d for d in cs if d.tile[0] == 1 and d.split in (1, 4)], lambda d: (d.split, d.subgroup)))
    assert count == 5


@pytest.mark.parametrize("case, widths", [((64, 3, 3, 1, 256, True), ({1, 2, 4}, {1, 2, 4})),
                                          ((256, 1, 4, 1, 64, True), ({1, 2, 4}, {1, 2}))])
def test_lanes_merges(case, widths, monkeypatch):
    """Flash-decoding's key groups of lanes, one candidate per (lanes, PART_R, MERGE_R, across subgroups or not):
    the subgroups' states merged 1, 2 or 4 invocations a slice, the chunks' likewise, in one round or several (head
    dim 256: more slices than invocations)."""
    from gpuengine.lowering.kernels.attention import lanes_merges

    vs = case[0] // 4
    seen = set()

    def pick(candidates):
        chosen = _first_of_each([d for d in candidates if d.subgroup and d.tile[0] > 1],
                                lambda d: (d.tile[0], *lanes_merges(d, vs)[1:]))
        seen.update(lanes_merges(d, vs)[1:] for d in chosen)
        return chosen

    assert _run_each(case, pick, monkeypatch) >= 6
    assert ({r for r, _ in seen}, {r for _, r in seen}) == widths, seen


def test_long_rows_get_key_chunks(monkeypatch):
    """Prefill of 8 queries a head over 512 keys at head dim 256 (a short prompt over a long cache): one workgroup a
    row would leave an invocation 32,768 multiply-adds, so the rows get flash-decoding's key chunks too
    (attention.long_rows); its key groups of lanes (what `discrete` chooses) at 1, 2 and more chunks, against
    LiteRT. (Forms holding a whole row of 256 channels per invocation are left out: on lavapipe some of them,
    flash-decoding or not, give wrong rows from run to run, on main too; docs/benchmarks.md.)"""
    from gpuengine.lowering.kernels.attention import long_rows

    assert long_rows(4 * 8, 512, 256, 256) and not long_rows(4 * 8, 64, 256, 256)
    count = _run_each((256, 1, 4, 8, 512, True), lambda cs: _first_of_each(
        [d for d in cs if d.subgroup and d.tile[0] > 1], lambda d: (d.tile[0], min(d.tile[1], 4))), monkeypatch)
    assert count >= 8
