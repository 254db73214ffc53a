"""The staged-row form of the hybrid FULLY_CONNECTED (Decomposition.staged, issue 32): where every tile of a
dispatch reads the same rows (one row tile), the workgroup normalizes and quantizes them once into workgroup
memory and the dot loop reads the words from there. The integers are the unstaged form's, so the outputs equal
LiteRT's as the unstaged ones do: checked for every staged candidate of small hybrid FCs (int8 and int4 weights)
and, forced into every projection and the LM head, on the litert-torch SmolLM's decode step (norm and residual
prologues, gated MLP, KV epilogue), against the unstaged program and LiteRT.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from builders import hybrid_fcs
from helpers import SHARED_MODELS, decode_feeds, run

from gpuengine import Interpreter
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.model.quantization import INT4
from gpuengine.oracle import random_inputs, relative_error, run_litert

SMOLLM = SHARED_MODELS / "smollm_4l_int8.tflite"


def _int4_gemvs() -> bytes:
    """One row of 64 and one of 40 x int4 weights (12 outputs): the int8 kernel's int4 reader, 64 also read 8
    words (a vec4<u32>) a load."""
    rng = np.random.default_rng(10)
    mb = ModelBuilder()
    outs = []
    for k, width in enumerate((64, 40)):
        q = rng.integers(-8, 8, (12, width)).astype(np.int8)
        nibbles = q.reshape(-1).astype(np.uint8) & 0xF
        x = mb.input(f"x{k}", (1, width))
        w = mb.const(f"w{k}", (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8), np.uint8,
                     Quantization(scale=rng.uniform(0.01, 0.05, 12).astype(np.float32),
                                  zero_point=np.zeros(12, np.int64), axis=0))
        mb.tensors[w] = dataclasses.replace(mb.tensors[w], shape=(12, width), type_code=INT4)
        outs.append(mb.op("FULLY_CONNECTED", [x, w, -1], (1, 12)))
    mb.output(*outs)
    return mb.build()


def test_int4_wide_candidates_equal_litert():
    """int4 rows of whole vec4<u32>s (8 int8 words a load, nibbles sign-extended in registers) are offered `wide`,
    staged or not; every candidate of both GEMVs gives LiteRT's outputs."""
    data = _int4_gemvs()
    feeds = random_inputs(data, seed=3)
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json")
    it.allocate_tensors()
    (prog,) = it.compiled.gpu_programs
    kinds = set()
    for index, dispatch in enumerate(list(prog.dispatches)):
        if dispatch.spec.shader != "fully_connected_int8":
            continue
        candidates = dispatch.spec.variants.candidates
        assert any(d.wide for d in candidates) == (dispatch.spec.params["P"] * dispatch.spec.params["SI"] % 8 == 0)
        for d in candidates:
            prog.replace(index, d)
            got = run(it, feeds)
            for t, r in ref.items():
                assert relative_error(got[t], r) <= 1e-5, f"{dispatch.spec.label}: {d}"
            kinds.add((d.wide, d.staged))
    assert kinds == {(False, False), (True, False), (False, True), (True, True)}


def test_every_staged_candidate_equals_litert():
    """Hybrid FCs of one or two rows (int8 576 -> 130, 6 -> 1, 2 rows of 15 pixels -> 9; int4 64, 40 -> 12): each
    staged candidate (tiles, splits in workgroup memory and subgroups, vec4<u32> weights) gives LiteRT's outputs;
    FCs whose rows no tile holds (3, 5) offer none."""
    checked = 0
    for data in (hybrid_fcs()[0], _int4_gemvs()):
        feeds = random_inputs(data, seed=3)
        ref = run_litert(data, feeds)
        it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json")
        it.allocate_tensors()
        (prog,) = it.compiled.gpu_programs
        for index, dispatch in enumerate(list(prog.dispatches)):
            variants = dispatch.spec.variants
            if dispatch.spec.shader != "fully_connected_int8" or variants is None:
                continue
            staged = [d for d in variants.candidates if d.staged]
            rows = dispatch.spec.params["OUT_ROWS"]
            assert all(d.tile[0] >= rows for d in staged)
            assert bool(staged) == (rows in (1, 2, 4)), dispatch.spec.label  # a tile of 1, 2 or 4 rows holds all
            chosen = dispatch.spec.decomposition
            for d in staged:
                prog.replace(index, d)
                got = run(it, feeds)
                for t, r in ref.items():
                    assert relative_error(got[t], r) <= 1e-5, f"{dispatch.spec.label}: {d}"
                checked += 1
            prog.replace(index, chosen)
    assert checked >= 20


def test_staged_projections_equal_unstaged_and_litert_on_smollm_decode():
    """SmolLM-135M (4 layers, dynamic_int8) decode on the discrete target's plan: every hybrid FC forced to a
    staged form (with subgroups, vec4<u32> weights where offered; then through workgroup memory, one word a load)
    gives the unstaged program's logits (the integers are the same; only the f32 order of the norm's sum of
    squares over the workgroup may move a value by an ulp) and LiteRT's greedy token."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    ref_runner = LiteRT(model_path=str(SMOLLM)).get_signature_runner("decode")
    feeds = decode_feeds(ref_runner)
    ref = ref_runner(**feeds)["logits"]
    it = Interpreter(model_path=str(SMOLLM), target="discrete", workgroup_cache="/nonexistent/cache.json")
    runner = it.get_signature_runner("decode")
    plain = runner(**feeds)["logits"]
    (prog,) = runner.compiled.gpu_programs
    fcs = [(i, d.spec.variants) for i, d in enumerate(prog.dispatches)
           if d.spec.shader == "fully_connected_int8" and d.spec.variants is not None]
    assert len(fcs) >= 4 * 4 + 1  # QKV, O, gate/up, down a layer, and the LM head
    for subgroup, wide in ((True, True), (False, False)):
        forced = 0
        for index, variants in fcs:
            options = [d for d in variants.candidates if d.staged and d.subgroup == subgroup
                       and d.wide == (wide and any(c.wide for c in variants.candidates))]
            assert options, prog.dispatches[index].spec.label
            prog.replace(index, options[len(options) // 2])
            forced += 1
        got = runner(**feeds)["logits"]
        assert forced == len(fcs)
        assert sum("row staged" in d.spec.label for d in prog.dispatches) == forced
        assert np.abs(got - plain).max() <= 1e-4 * (plain.max() - plain.min())
        assert np.abs(got - ref).max() <= 1e-3 * (ref.max() - ref.min())
        assert got.argmax() == ref.argmax() == plain.argmax()


def test_staged_residual_prologue_equals_unstaged_on_a_gemma_decoder():
    """Gemma 3's form (int8 weights; sandwich norms: x + RMS_NORM(o) as the next projection's residual prologue,
    the row written by the staged form's workgroup 0): every hybrid FC forced staged gives the unstaged
    program's outputs (the builder's int8 model has no LiteRT oracle at 1e-3: tests/models/test_decoder_zoo.py)."""
    from gpuengine.zoo.decoder import DecoderConfig, decoder

    data = decoder(DecoderConfig(layers=2, heads=2, kv_heads=1, head_dim=64, weights="int8", gemma=True), seed=7)
    it = Interpreter(model_content=data, target="discrete", workgroup_cache="/nonexistent/cache.json")
    runner = it.get_signature_runner("decode")
    rng = np.random.default_rng(4)
    feeds = {name: (np.array([5], np.int32) if name == "input_pos" else np.array([[11]], np.int32)
                    if name == "tokens" else rng.standard_normal(tuple(d["shape"])).astype(np.float32))
             for name, d in runner.get_input_details().items()}
    plain = runner(**feeds)
    (prog,) = runner.compiled.gpu_programs
    residual = 0
    for index, dispatch in enumerate(list(prog.dispatches)):
        if dispatch.spec.shader == "fully_connected_int8" and dispatch.spec.variants is not None:
            staged = [d for d in dispatch.spec.variants.candidates if d.staged and not d.subgroup]
            prog.replace(index, staged[-1])  # the largest workgroup: several subgroups, a tree of 6+ levels
            residual += "+ADD + " in dispatch.spec.label
    assert residual >= 2
    got = runner(**feeds)
    for name, r in plain.items():
        assert np.abs(got[name] - r).max() <= 1e-4 * (r.max() - r.min()), name


def test_float_arithmetic_stages_the_normalized_row():
    """hybrid_arithmetic="float": the FCs with a norm prologue (QKV, gate/up, LM head) offer the staged form (the
    normalized f32 row in workgroup memory), the others none; forced everywhere offered, SmolLM's decode logits
    are the unstaged program's."""
    it = Interpreter(model_path=str(SMOLLM), target="discrete", workgroup_cache="/nonexistent/cache.json",
                     hybrid_arithmetic="float")
    runner = it.get_signature_runner("decode")
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    feeds = decode_feeds(LiteRT(model_path=str(SMOLLM)).get_signature_runner("decode"))
    plain = runner(**feeds)["logits"]
    (prog,) = runner.compiled.gpu_programs
    forced = 0
    for index, dispatch in enumerate(list(prog.dispatches)):
        if dispatch.spec.shader != "fully_connected_int8":
            continue
        staged = [d for d in dispatch.spec.variants.candidates if d.staged]
        assert bool(staged) == dispatch.spec.label.startswith("RMS_NORM"), dispatch.spec.label
        if staged:
            prog.replace(index, staged[len(staged) // 2])
            forced += 1
    assert forced == 4 * 2 + 1
    got = runner(**feeds)["logits"]
    assert np.abs(got - plain).max() <= 1e-5 * (plain.max() - plain.min())
    assert got.argmax() == plain.argmax()
