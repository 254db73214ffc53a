"""The zoo's litert-torch-style decoders (gpuengine/zoo/decoder.py) at real head dims against LiteRT.

LiteRT running both signatures of every generated model is the builder's own test; the seeded weights must give
activations worth comparing (logits spread, attention neither uniform nor one-hot). Then gpuengine against
LiteRT over head dims 64 / 128 / 256, 1 or 3 query heads per KV head, int8 (hybrid) and f32 weights, both KV
cache layouts: every output of both signatures within 1e-3 of LiteRT's (relative to its range), all on the GPU in
one partition, and prefill followed by 8 greedy decode steps giving LiteRT's tokens. Tiny widths, vocabulary and
layer counts keep each case to a few seconds of shader compilation.

The oracle is LiteRT's builtin kernels (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES): LiteRT 2.3's default
XNNPACK delegate returns decode logits 15-65% (of their range) away from both the builtin kernels and the float64
reference whenever head_dim differs from the model width (checked in test_xnnpack_departs_where_head_dim_is_not_width).
For int8 weights LiteRT's two kernel sets compute the hybrid FULLY_CONNECTED differently (builtin: each activation
row quantized symmetric; XNNPACK: asymmetric), ~1e-2 apart: the int8 case has head_dim == width so that XNNPACK is
sound there, and gpuengine must be within the tolerance of one of the two.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import SHARED_MODELS

from gpuengine.oracle import litert_interpreter, range_error
from gpuengine.zoo.decoder import DecoderConfig, decoder

TOLERANCE = 1e-3  # max |ours - LiteRT| / (range of LiteRT's output), the goal for language models
GREEDY_STEPS = 8

CASES = {
    "d64_g1_f32": DecoderConfig(layers=2, heads=2, kv_heads=2, head_dim=64, weights="f32", cache=16, prefill=4),
    "d128_g3_f32_transposed": DecoderConfig(layers=1, heads=3, kv_heads=1, head_dim=128, weights="f32",
                                            kv_layout="transposed"),
    "d128_g1_int8": DecoderConfig(layers=1, width=128, heads=1, kv_heads=1, head_dim=128, weights="int8"),
    "d256_g2_f32": DecoderConfig(layers=1, heads=2, kv_heads=1, head_dim=256, weights="f32", cache=16, prefill=4),
    # Gemma 3's forms (q/k norms, sandwich norms as the next projection's prologue: passes/fuse_residual_norm.py)
    "d64_g2_gemma_f32": DecoderConfig(layers=2, heads=2, kv_heads=1, head_dim=64, weights="f32", cache=16, prefill=4,
                                      gemma=True),
}
EXPECTED_FAILURES = {"d128_g1_int8": (
    "int8 weights: gpuengine's hybrid FC quantizes activation rows as XNNPACK does (asymmetric), 9e-3 of the range "
    "from LiteRT's builtin kernels (symmetric rows); LiteRT's XNNPACK delegate, which it matches to 5e-8 on the "
    "litert-torch SmolLM export, departs on this builder's model (0.5): no oracle here at 1e-3")}
# SmolLM-135M's layer shape (head dim 64, 3 query heads per KV head, int8): checked on LiteRT only here (CI time);
# the shared smollm_4l_int8.tflite export is the GPU test of that shape.
LITERT_ONLY = {"d64_g3_int8": DecoderConfig(layers=1, heads=3, kv_heads=1, head_dim=64, weights="int8")}


def case_params(names=None) -> list:
    return [pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=False, reason=EXPECTED_FAILURES[name])]
                         if name in EXPECTED_FAILURES else []) for name in (names or CASES)]


_MODELS: dict[str, bytes] = {}
_INTERPRETERS: dict[str, tuple] = {}


def model(name: str) -> bytes:
    if name not in _MODELS:
        _MODELS[name] = decoder({**CASES, **LITERT_ONLY}[name], seed=7)
    return _MODELS[name]


def interpreters(name: str) -> tuple:
    """(gpuengine, [LiteRT oracles]) for a case, compiled once per test session: the builtin kernels, and for int8
    weights XNNPACK too (see the module docstring)."""
    if name not in _INTERPRETERS:
        from gpuengine import Interpreter

        oracles = [litert_interpreter(model(name), builtin=True)]
        if CASES[name].weights == "int8":
            oracles.append(litert_interpreter(model(name)))
        _INTERPRETERS[name] = Interpreter(model_content=model(name)), oracles
    return _INTERPRETERS[name]


def feeds_for(runner, config: DecoderConfig, rng: np.random.Generator, position: int) -> dict[str, np.ndarray]:
    """Tokens in the vocabulary at positions from `position`, a random cache (as earlier steps would leave it)."""
    feeds = {}
    for name, detail in runner.get_input_details().items():
        shape = tuple(detail["shape"])
        if name == "tokens":
            feeds[name] = rng.integers(0, config.vocab, shape).astype(np.int32)
        elif name == "input_pos":
            feeds[name] = (position + np.arange(shape[0])).astype(np.int32)
        else:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", [*CASES, *LITERT_ONLY])
def test_litert_runs_both_signatures_with_sane_activations(name: str):
    """The builder's own test: LiteRT runs both signatures; logits spread over several units; attention rows
    (the SOFTMAX of each composite's decomposition, evaluated in float64) are neither uniform nor one-hot."""
    from gpuengine.reference import SignatureRunner, run_reference

    config, data = {**CASES, **LITERT_ONLY}[name], model(name)
    interpreter = litert_interpreter(data, builtin=True)
    assert set(interpreter.get_signature_list()) == {config.prefill_signature, "decode"}
    rng = np.random.default_rng(0)
    prefill = interpreter.get_signature_runner(config.prefill_signature)
    caches = prefill(**feeds_for(prefill, config, rng, 0))
    assert sorted(caches) == sorted(f"kv_cache_{kind}_{i}" for kind in "kv" for i in range(config.layers))
    decode = interpreter.get_signature_runner("decode")
    feeds = {**feeds_for(decode, config, rng, config.prefill), **caches}
    logits = decode(**feeds)["logits"]
    assert logits.shape == (1, 1, config.vocab) and np.all(np.isfinite(logits))
    assert 1.0 < float(logits.std()) < 10.0, float(logits.std())

    exact = SignatureRunner(data, "decode")  # its graph, to read every tensor
    graph, signature = exact.graph, exact.signature
    values = run_reference(graph, {signature.inputs[k]: v for k, v in feeds.items()}, all_tensors=True)
    reference_logits = values[signature.outputs["logits"]]
    # The float64 reference read the same model: f32 weights agree to rounding, int8 to the activation quantization.
    assert range_error(logits, reference_logits) < (1e-5 if config.weights == "f32" else 0.03)
    softmaxes = [values[op.outputs[0]] for op in graph.ops if op.code == "SOFTMAX"]
    assert len(softmaxes) == config.layers
    keys = config.prefill + 1  # the unmasked keys of the decode step
    for probs in softmaxes:
        peaks = probs.max(axis=-1)
        assert np.all(np.abs(probs.sum(axis=-1) - 1) < 1e-6) and np.all(probs[..., keys:] == 0)
        assert 1.5 / keys < float(peaks.mean()) < 0.9, peaks  # not uniform (1/keys), not one-hot (1)


@pytest.mark.parametrize("name", case_params())
def test_signatures_match_litert(name: str):
    """Every output of both signatures within TOLERANCE of LiteRT's, on the GPU in one partition."""
    config = CASES[name]
    ours, oracles = interpreters(name)
    rng = np.random.default_rng(1)
    for key, position in ((config.prefill_signature, 0), ("decode", config.cache // 2)):
        runner = ours.get_signature_runner(key)
        feeds = feeds_for(runner, config, rng, position)
        got = runner(**feeds)
        errors = []
        for oracle in oracles:
            want = oracle.get_signature_runner(key)(**feeds)
            assert set(got) == set(want) and all(got[o].shape == want[o].shape for o in want), key
            errors.append(max(range_error(got[o], want[o]) for o in want))
        assert min(errors) <= TOLERANCE, (key, errors)
        plan = runner.compiled.plan
        assert [p.device for p in plan.partitions] == ["gpu"], (key, [p.device for p in plan.partitions])


@pytest.mark.parametrize("name", case_params(["d64_g1_f32", "d128_g1_int8"]))
def test_greedy_decoding_matches_litert(name: str):
    """Prefill a prompt, then GREEDY_STEPS decode steps feeding back the argmax and the caches: LiteRT's tokens,
    logits within TOLERANCE at every step."""
    config = CASES[name]
    ours, oracles = interpreters(name)
    litert = oracles[-1]  # XNNPACK's hybrid FC for int8 weights (asymmetric rows, as gpuengine computes it)
    prompt = np.random.default_rng(2).integers(0, config.vocab, (1, config.prefill)).astype(np.int32)
    positions = np.arange(config.prefill, dtype=np.int32)
    states = []
    for interpreter in (ours, litert):
        prefill = interpreter.get_signature_runner(config.prefill_signature)
        zeros = {name: np.zeros(detail["shape"], np.float32) for name, detail in prefill.get_input_details().items()
                 if name.startswith("kv_cache")}
        states.append(prefill(tokens=prompt, input_pos=positions, **zeros))
    tokens = [int(prompt[0, -1])] * 2
    for step in range(GREEDY_STEPS):
        logits = []
        for i, interpreter in enumerate((ours, litert)):
            out = interpreter.get_signature_runner("decode")(
                tokens=np.array([[tokens[i]]], np.int32),
                input_pos=np.array([config.prefill + step], np.int32), **states[i])
            logits.append(out.pop("logits"))
            states[i] = out
        assert range_error(logits[0], logits[1]) <= TOLERANCE, step
        tokens = [int(np.argmax(x)) for x in logits]
        assert tokens[0] == tokens[1], step


SMOLLM = SHARED_MODELS / "smollm_4l_int8.tflite"


@pytest.mark.skipif(not SMOLLM.exists(), reason=f"{SMOLLM} is absent (the shared test models)")
def test_builder_writes_what_litert_torch_writes():
    """At SmolLM-135M's shape (4 layers, width 576, 9 query heads on 3 KV heads of 64, MLP 1536, vocab 49152,
    cache 256, prefill 32, int8) the builder writes litert-torch 0.10's export op for op: the same count of every
    op in both signatures and in every composite's decomposition, the same inputs and outputs, and a file of the
    same size within 2% (shared/models/smollm_4l_int8.tflite, made by litert-torch from random weights)."""
    import collections

    from gpuengine.model.reader import read_model

    reference = read_model(str(SMOLLM))
    data = decoder(DecoderConfig(layers=4, width=576, heads=9, kv_heads=3, head_dim=64, mlp=1536, vocab=49152,
                                 cache=256, prefill=32))
    ours = read_model(data)
    for key in ("prefill_32", "decode"):
        a, b = (next(s for s in m.signatures if s.key == key) for m in (reference, ours))
        ga, gb = reference.subgraphs[a.subgraph], ours.subgraphs[b.subgraph]
        assert collections.Counter(op.code for op in ga.ops) == collections.Counter(op.code for op in gb.ops), key
        for side in ("inputs", "outputs"):
            assert {n: (ga.tensors[t].shape, ga.tensors[t].dtype) for n, t in getattr(a, side).items()} == \
                {n: (gb.tensors[t].shape, gb.tensors[t].dtype) for n, t in getattr(b, side).items()}, (key, side)

    def decompositions(model) -> collections.Counter:
        return collections.Counter(g.name.rsplit(".impl", 1)[0] + ":" + ",".join(sorted(op.code for op in g.ops))
                                   for g in model.subgraphs[2:])

    assert decompositions(reference) == decompositions(ours)
    assert abs(len(data) / SMOLLM.stat().st_size - 1) < 0.02


def test_xnnpack_departs_where_head_dim_is_not_width():
    """Why the oracle is LiteRT's builtin kernels: with its default XNNPACK delegate, LiteRT 2.3's decode logits of
    an f32 decoder whose head_dim (128) differs from its width (64) are far from the float64 reference, while the
    builtin kernels agree with it to float rounding. (If a LiteRT upgrade fixes XNNPACK this test fails: then the
    default interpreter may become the oracle again.)"""
    from gpuengine.reference import SignatureRunner

    config = DecoderConfig(layers=1, heads=1, kv_heads=1, head_dim=128, weights="f32", cache=16, prefill=4)
    data = decoder(config, seed=7)
    rng = np.random.default_rng(0)
    builtin = litert_interpreter(data, builtin=True).get_signature_runner("decode")
    feeds = feeds_for(builtin, config, rng, config.prefill)
    reference = SignatureRunner(data, "decode")(**feeds)["logits"]
    default = litert_interpreter(data).get_signature_runner("decode")
    assert range_error(builtin(**feeds)["logits"], reference) < 1e-5
    assert range_error(default(**feeds)["logits"], reference) > 0.05
