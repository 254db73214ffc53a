"""Scoring and log-probabilities on the toy bundle: Session.score equals the log-softmax sums of LiteRT's
Interpreter driving the same signatures (float32), and LiteRT-LM's text scoring (litert-lm-api, its own CPU
arithmetic) to 0.5%, ranking continuations alike; the session is left as it was; generate(logprobs=k) records
each token's log-probability and k alternatives, consistent with score_tokens of the same tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder.litertlm_builder")

from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.llm import Engine, SamplerConfig  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")
CONTINUATIONS = ["the river", "green world", "sea"]


@pytest.fixture(scope="module")
def engine(bundle: Path) -> Engine:
    return Engine(bundle)


def litert_scores(engine: Engine, ids: list[int], continuation: list[int]) -> np.ndarray:
    """Log-probabilities of `continuation` after `ids` with LiteRT's Interpreter, one decode step per token."""
    from ai_edge_litert.interpreter import Interpreter

    decode = Interpreter(model_content=engine.bundle.model).get_signature_runner("decode")
    details = decode.get_input_details()
    names = sorted(set(details) & set(decode.get_output_details()))
    cache = {n: np.zeros(details[n]["shape"], details[n]["dtype"]) for n in names}
    out = []
    fed = [*ids, *continuation[:-1]]
    for position, token in enumerate(fed):
        result = decode(tokens=np.array([[token]], np.int32), input_pos=np.array([position], np.int32), **cache)
        cache = {n: result[n] for n in names}
        if position >= len(ids) - 1:
            x = result["logits"].reshape(-1).astype(np.float64)
            target = continuation[position - len(ids) + 1]
            out.append(x[target] - x.max() - np.log(np.exp(x - x.max()).sum()))
    return np.array(out)


@pytest.mark.fp32_only("log-probabilities compared with LiteRT's float32 Interpreter")
def test_scores_equal_litert_interpreter(engine: Engine) -> None:
    session = engine.create_session(apply_prompt_template=False)
    ids = session.prompt_ids("the sea")
    pieces = [engine.tokenizer.encode(c) for c in CONTINUATIONS]
    ours = session.score_tokens(ids, pieces)
    for got, piece in zip(ours, pieces, strict=True):
        np.testing.assert_allclose(got, litert_scores(engine, ids, piece), atol=1e-4)
    assert session.score("the sea", CONTINUATIONS) == pytest.approx([float(s.sum()) for s in ours], abs=1e-9)
    assert session.position == 0 and session.history == []  # scoring left the session as it was


@pytest.mark.fp32_only("log-probabilities compared with LiteRT-LM's CPU engine")
def test_scores_match_litert_lm_text_scoring(engine: Engine, bundle: Path) -> None:
    litert_lm = pytest.importorskip("litert_lm")
    lm = litert_lm.Engine(str(bundle), backend=litert_lm.Backend.CPU())
    theirs = []
    try:
        for continuation in CONTINUATIONS:  # one target per call; a fresh session each (scoring advances it)
            session = lm.create_session(apply_prompt_template=False)
            session.run_prefill(["the sea"])
            theirs.append(session.run_text_scoring([continuation]).scores[0])
            session.close()
    finally:
        lm.close()
    ours = engine.create_session(apply_prompt_template=False).score("the sea", CONTINUATIONS)
    np.testing.assert_allclose(ours, theirs, rtol=5e-3)
    assert np.argsort(ours).tolist() == np.argsort(theirs).tolist()


def test_score_after_history_and_session_unchanged(engine: Engine) -> None:
    """Scores after a turn: the session's history counts, the session goes on as one that never scored."""
    session = engine.create_session(apply_prompt_template=False)
    first = session.generate("the sea", 5)
    state = (session.position, list(session.history), list(session.pending))
    scores = session.score("the river", CONTINUATIONS)
    assert (session.position, session.history, session.pending) == state
    twin = engine.create_session(apply_prompt_template=False)
    assert twin.generate("the sea", 5) == first
    assert twin.score("the river", CONTINUATIONS) == pytest.approx(scores, abs=1e-5)
    assert session.generate("green world", 6) == twin.generate("green world", 6)
    with pytest.raises(ValueError, match="list of strings"):
        session.score("the sea", "the river")
    with pytest.raises(ValueError, match="at least one continuation"):
        session.score_tokens([3], [])


@pytest.mark.parametrize("config", [SamplerConfig(), SamplerConfig(top_k=8, temperature=0.9, seed=4)],
                         ids=["greedy", "seeded"])
def test_generation_logprobs(engine: Engine, config: SamplerConfig) -> None:
    plain = engine.create_session(apply_prompt_template=False, sampler_config=config)
    expected = list(plain.generate_tokens(plain.prompt_ids("the sea"), 8))  # the GPU loop
    session = engine.create_session(apply_prompt_template=False, sampler_config=config)
    ids = session.prompt_ids("the sea")
    tokens = list(session.generate_tokens(ids, 8, logprobs=3))
    assert tokens == expected and engine.stats.loop == "host"
    records = session.logprobs
    assert [r.token for r in records] == tokens
    for r in records:
        values = [lp for _, lp in r.top]
        assert len(r.top) == 3 and values == sorted(values, reverse=True) and r.logprob <= 0
        assert np.exp(values).sum() <= 1 + 1e-9
        if config.greedy:
            assert r.top[0] == (r.token, r.logprob)
    again = engine.create_session(apply_prompt_template=False).score_tokens(ids, [tokens])[0]
    np.testing.assert_allclose([r.logprob for r in records], again, atol=1e-6)
    with pytest.raises(ValueError, match="logprobs must be None or an integer in"):
        session.generate_tokens([3], 4, logprobs=21)
