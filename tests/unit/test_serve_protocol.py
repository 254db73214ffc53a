"""gpuengine.serve.protocol: OpenAI requests checked field by field (the error names the field), the sampler a
request asks for over the bundle's, stop strings cut across pieces. No GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuengine.llm.sampling import SamplerConfig
from gpuengine.serve import protocol
from gpuengine.serve.protocol import ApiError, StopText

BASE = SamplerConfig()  # a bundle without sampler parameters: greedy


def _param(call, body) -> str | None:
    with pytest.raises(ApiError) as info:
        call(body, BASE)
    assert info.value.status == 400 and info.value.message
    assert set(info.value.body()["error"]) == {"message", "type", "param", "code"}
    return info.value.param


@pytest.mark.parametrize("extra, param", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": "hot"}, "temperature"),
    ({"temperature": float("nan")}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_p": 1.01}, "top_p"),
    ({"top_k": 0}, "top_k"), ({"top_k": 65}, "top_k"), ({"seed": -1}, "seed"), ({"seed": 2**32}, "seed"),
    ({"seed": 1.5}, "seed"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
    ({"n": 3}, "n"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": ""}, "stop"),
    ({"stream": "yes"}, "stream"), ({"logprobs": 9}, "logprobs"), ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"logit_bias": {"5": 1}}, "logit_bias"), ({"response_format": {"type": "xml"}}, "response_format"),
    ({"prompt": None}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": [1, "2"]}, "prompt"),
    ({"model": ""}, "model"),
])
def test_bad_completion_fields_are_named(extra: dict, param: str) -> None:
    assert _param(protocol.completion, {"model": "m", "prompt": "hi", **extra}) == param


@pytest.mark.parametrize("messages, param", [
    (None, "messages"), ([], "messages"), (["hi"], "messages[0]"),
    ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], "messages[1].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content"),
])
def test_bad_chat_fields_are_named(messages: object, param: str) -> None:
    assert _param(protocol.chat, {"model": "m", "messages": messages}) == param


def test_json_body() -> None:
    for raw in (b"{", b"\xff", b"[1]", b"null"):
        with pytest.raises(ApiError) as info:
            protocol.parse_json(raw)
        assert info.value.status == 400 and info.value.code == "invalid_json"
    assert protocol.parse_json(b'{"a": 1}') == {"a": 1}


def test_sampler_over_the_bundle() -> None:
    request = protocol.completion({"model": "m", "prompt": "hi", "temperature": 0}, BASE)
    assert request.sampler.greedy
    sampled = protocol.completion({"model": "m", "prompt": "hi", "temperature": 0.7, "seed": 9}, BASE).sampler
    assert not sampled.greedy and sampled.top_k == 64 and sampled.seed == 9 and sampled.temperature == 0.7
    bundle = SamplerConfig(top_k=40, top_p=0.9, temperature=0.8, seed=3)
    own = protocol.completion({"model": "m", "prompt": "hi"}, bundle).sampler
    assert replace(own, seed=3) == bundle  # nothing asked: the bundle's, but a seed drawn per request
    seeds = {protocol.completion({"model": "m", "prompt": "hi"}, bundle).sampler.seed for _ in range(4)}
    assert len(seeds) > 1
    assert protocol.completion({"model": "m", "prompt": "hi", "seed": 5}, bundle).sampler.seed == 5
    assert protocol.completion({"model": "m", "prompt": "hi", "top_k": 5, "top_p": 0.5, "seed": 3}, bundle).sampler \
        == SamplerConfig(top_k=5, top_p=0.5, temperature=0.8, seed=3)


def test_completion_and_chat_requests() -> None:
    r = protocol.completion({"model": "m", "prompt": ["hello"], "max_tokens": 5, "stop": "x", "stream": True,
                             "stream_options": {"include_usage": True}, "n": 1}, BASE)
    assert (r.prompt, r.max_tokens, r.stop, r.stream, r.include_usage) == ("hello", 5, ["x"], True, True)
    assert protocol.completion({"model": "m", "prompt": [1, 2, 3]}, BASE).prompt_ids == [1, 2, 3]
    c = protocol.chat({"model": "m", "max_completion_tokens": 7, "logprobs": True, "top_logprobs": 2,
                       "messages": [{"role": "system", "content": [{"type": "text", "text": "be "},
                                                                   {"type": "text", "text": "brief"}]},
                                    {"role": "assistant", "content": None}]}, BASE)
    assert c.messages == [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": ""}]
    assert c.max_tokens == 7 and c.logprobs == 2
    assert protocol.chat({"model": "m", "messages": [{"role": "user", "content": "q"}],
                          "response_format": {"type": "text"}}, BASE).response_format is None


def test_stop_text_holds_back_what_may_start_a_stop() -> None:
    stop = StopText(["END", "\n\n"])
    out = [stop.push(p) for p in ["Hello E", "N", "d of it", "\n", "x", "\n", "\nmore"]]
    assert "".join(out) == "Hello ENd of it\nx" and stop.stopped
    assert out[0] == "Hello " and out[2] == "ENd of it"
    assert stop.flush() == "" and stop.push("later") == ""
    loose = StopText(["STOP"])
    assert loose.push("ab S") == "ab " and loose.flush() == "S"
    assert StopText([]).push("all of it") == "all of it"
