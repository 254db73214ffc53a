"""Text generation with no files (the zoo bundle: decoder_tiny, hybrid int8, with a SentencePiece tokenizer trained
on the package's text), the LLM layer's hybrid default (float activations against int8 weights, LiteRT-LM's
arithmetic; "integer" is LiteRT's Interpreter's, tested against it), and why a reply ended (finish_reason; the CLI's
notice when the KV cache cut it)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from gpuengine.llm import Engine, SamplerConfig  # noqa: E402

PROMPT = "The river runs"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine("decoder_tiny")


def greedy(engine: Engine, max_tokens: int) -> list[int]:
    session = engine.create_session(apply_prompt_template=False, sampler_config=SamplerConfig())
    return list(session.generate_tokens(session.prompt_ids(PROMPT), max_tokens))


def test_hybrid_default_is_float(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM layer's default is hybrid_arithmetic="float" (the Interpreter's own stays "integer"), its tokens
    are those of an engine told "float", and the two arithmetics give other logits on this model."""
    from gpuengine import Interpreter, zoo

    monkeypatch.delenv("GPUENGINE_HYBRID", raising=False)
    assert engine.interpreter.engine_options.hybrid_arithmetic == "float"
    assert Interpreter(model_content=zoo.get("decoder_tiny")).engine_options.hybrid_arithmetic == "integer"
    assert greedy(engine, 16) == greedy(Engine("decoder_tiny", hybrid_arithmetic="float"), 16)

    def decode_logits(arithmetic: str) -> np.ndarray:
        runner = Interpreter(model_content=zoo.get("decoder_tiny"),
                             hybrid_arithmetic=arithmetic).get_signature_runner("decode")
        feeds = {name: np.zeros(d["shape"], d["dtype"]) for name, d in runner.get_input_details().items()}
        feeds["tokens"] = np.array([[40]], np.int32)
        return runner(**feeds)["logits"].reshape(-1)

    assert not np.array_equal(decode_logits("float"), decode_logits("integer"))


def test_integer_hybrid_equals_litert_interpreter(engine: Engine) -> None:
    """hybrid_arithmetic="integer" (--hybrid integer): the greedy tokens of LiteRT's Interpreter driving the same
    signatures."""
    pytest.importorskip("ai_edge_litert.interpreter")
    from gpuengine.llm.reference import LiteRTDecoder

    integer = Engine("decoder_tiny", hybrid_arithmetic="integer")
    session = integer.create_session(apply_prompt_template=False)
    ids = session.prompt_ids(PROMPT)
    theirs = LiteRTDecoder(integer.bundle.model, integer.cache_length).generate(ids, 16, SamplerConfig(),
                                                                               integer.bundle.stop_tokens)
    assert list(session.generate_tokens(ids, 16)) == theirs


def test_finish_reason(engine: Engine) -> None:
    session = engine.create_session(apply_prompt_template=False, sampler_config=SamplerConfig())
    assert session.finish_reason is None
    tokens = list(session.generate_tokens(session.prompt_ids(PROMPT), 4))
    assert len(tokens) == 4 and session.finish_reason == "length"
    session = engine.create_session(apply_prompt_template=False, sampler_config=SamplerConfig())
    ids = session.prompt_ids(PROMPT)
    tokens = list(session.generate_tokens(ids, 1000))
    assert len(tokens) == engine.cache_length - (len(ids) - 1) and session.finish_reason == "cache_full"
    stop = tokens[2]
    saved = engine.bundle.stop_ids
    engine.bundle.stop_ids = [[stop]]
    try:
        session = engine.create_session(apply_prompt_template=False, sampler_config=SamplerConfig())
        got = list(session.generate_tokens(ids, 1000))
        assert got == tokens[:tokens.index(stop) + 1] and session.finish_reason == "stop"
    finally:
        engine.bundle.stop_ids = saved


def test_cli_generate_zoo_bundle_says_when_the_cache_cut_it(capsys: pytest.CaptureFixture) -> None:
    from gpuengine.tools.cli import main

    assert main(["generate", "decoder_tiny", "--prompt", PROMPT, "--max-tokens", "4", "--no-template"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "(length)" in err and "cut" not in err
    assert main(["generate", "decoder_tiny", "--prompt", PROMPT, "--max-tokens", "100", "--no-template"]) == 0
    out, err = capsys.readouterr()
    notice = [line for line in err.splitlines() if line.startswith("gpuengine: the reply was cut")]
    assert len(notice) == 1 and "KV cache's 32 positions are full (--max-tokens 100 asked for more)" in notice[0]
    assert "(cache_full)" in err
