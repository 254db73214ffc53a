"""Structured output with llguidance: replies of a random-weight decoder held to a JSON schema (bounded lengths),
a regular expression and a Lark grammar parse and validate every time (greedy and sampled), on a bundle whose
byte-level tokenizer can spell JSON and whose metadata carries a ChatML template (builders.json_bundle); the
SentencePiece adapter on the toy bundle; bad response formats are ValueErrors naming the part."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("llguidance")
pytest.importorskip("jinja2")
pytest.importorskip("litert_lm_builder.litertlm_builder")
jsonschema = pytest.importorskip("jsonschema")

from builders import json_bundle  # noqa: E402
from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.llm import Engine, SamplerConfig  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "ok", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "ok": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
CONFIGS = [SamplerConfig(), *(SamplerConfig(top_k=40, temperature=1.2, seed=s) for s in (1, 2, 3))]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return Engine(json_bundle(tmp_path_factory.mktemp("json")))


@pytest.mark.parametrize("config", CONFIGS, ids=["greedy", "seed1", "seed2", "seed3"])
def test_json_schema_replies_validate(engine: Engine, config: SamplerConfig) -> None:
    conversation = engine.create_conversation(system_message="Answer in JSON.", max_tokens=120,
                                              sampler_config=config)
    reply = conversation.send_message("Describe a person.", response_format=FORMAT)["content"]
    jsonschema.validate(json.loads(reply), SCHEMA)
    assert conversation.finish_reason == "stop" and engine.stats.loop == "gpu"
    free = conversation.send_message("And without a format?")["content"]  # the next turn is unconstrained
    with pytest.raises(ValueError):
        json.loads(free)


@pytest.mark.parametrize("config", CONFIGS[:2], ids=["greedy", "seed1"])
def test_gpu_mask_equals_host_mask(engine: Engine, config: SamplerConfig) -> None:
    """The GPU loop's sampler drawing within the uploaded bitmask gives the tokens the host loop draws from the
    masked logits; a step reads 4 bytes back and uploads the mask (vocabulary / 8 bytes)."""
    runs = {}
    for loop in ("gpu", "host"):
        session = engine.create_session(apply_prompt_template=False, sampler_config=config, loop=loop)
        ids = session.prompt_ids("person:")
        runs[loop] = list(session.generate_tokens(ids, 120, constraint=engine.constraint(FORMAT)))
        stats = engine.stats
        assert stats.loop == loop
    text = engine.tokenizer.decode([t for t in runs["gpu"] if t not in engine.bundle.stop_tokens])
    jsonschema.validate(json.loads(text), SCHEMA)
    assert runs["gpu"] == runs["host"]
    assert stats.loop == "host"  # the last run's; the GPU run's figures:
    session = engine.create_session(apply_prompt_template=False, sampler_config=config)
    tokens = list(session.generate_tokens(session.prompt_ids("person:"), 120, constraint=engine.constraint(FORMAT)))
    stats = engine.stats
    assert stats.bytes_read == 4 * len(tokens) and stats.max_in_flight == 1
    assert stats.bytes_uploaded == stats.uploads * (-(-engine.vocab // 32) * 4) and stats.uploads == len(tokens)


def test_regex_grammar_and_json_object(engine: Engine) -> None:
    session = engine.create_session(apply_prompt_template=False, sampler_config=CONFIGS[1])
    pattern = r"[a-z]{3,6}-[0-9]{2}"
    text = session.generate("code:", 40, constraint=engine.constraint({"type": "regex", "regex": pattern}))
    assert re.fullmatch(pattern, text), text
    lark = 'start: "yes" | "no" | "maybe " NUMBER\nNUMBER: /[0-9]{1,3}/'
    for config in CONFIGS:
        answer = engine.create_session(apply_prompt_template=False, sampler_config=config).generate(
            "answer:", 20, constraint=engine.constraint({"type": "grammar", "grammar": lark}))
        assert re.fullmatch(r"yes|no|maybe [0-9]{1,3}", answer), answer
    value = engine.create_session(apply_prompt_template=False).generate(
        "json:", 120, constraint=engine.constraint({"type": "json_schema", "json_schema": {"schema": {
            "type": "object", "properties": {"a": {"type": "integer", "maximum": 9, "minimum": 0}},
            "required": ["a"], "additionalProperties": False}}}))
    assert json.loads(value)["a"] in range(10)
    obj = engine.create_conversation(max_tokens=200).send_message("x", response_format={"type": "json_object"})
    try:  # any object: it may not close within max_tokens, but what came is a JSON object's start
        assert isinstance(json.loads(obj["content"]), dict)
    except ValueError:
        assert obj["content"].startswith("{")


def test_sentencepiece_tokenizer_adapter(bundle: Path) -> None:
    """The toy bundle's SentencePiece tokenizer (word-boundary pieces, byte pieces) through llguidance."""
    toy = SHARED_MODELS / "toy_decoder_kv.tflite"
    if not toy.is_file():
        pytest.skip(f"shared model {toy.name} not found")
    engine = Engine(bundle)
    pattern = r"(sea|river|rain)( (sea|river|rain)){1,3}"  # forced text ("in ") tokenized with its space
    for config in CONFIGS[:3]:
        text = engine.create_session(apply_prompt_template=False, sampler_config=config).generate(
            "the", 20, constraint=engine.constraint({"type": "regex", "regex": pattern}))
        assert re.fullmatch(pattern, text.strip()), text


def test_bad_response_formats(engine: Engine) -> None:
    assert engine.constraint(None) is None and engine.constraint({"type": "text"}) is None
    with pytest.raises(ValueError, match="response_format type 'xml'"):
        engine.constraint({"type": "xml"})
    with pytest.raises(ValueError, match=r"give \{'json_schema': \{'schema'"):
        engine.constraint({"type": "json_schema", "json_schema": {"name": "x"}})
    with pytest.raises(ValueError, match="response_format regex"):
        engine.constraint({"type": "regex", "regex": "(unclosed"})
    with pytest.raises(ValueError, match="response_format grammar"):
        engine.constraint({"type": "grammar", "grammar": "start: undefined_rule"})
    with pytest.raises(ValueError, match="must be an object"):
        engine.constraint("json")
