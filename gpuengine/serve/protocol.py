"""The OpenAI API's requests, checked: each mistake an ApiError naming the field (OpenAI's error body
{"error": {"message", "type", "param", "code"}}), before anything reaches the engine. Pure Python: no engine, no
web framework (the unit tests drive it directly).

Sampling: `temperature` 0 is greedy; `top_p` in (0, 1]; `seed` an integer in [0, 2^32); `top_k` (not OpenAI's, as
vLLM and llama.cpp take it) in [1, 64]. Where the request samples (temperature > 0) and neither it nor the bundle
gives top_k, the sampler keeps the 64 likeliest tokens (the GPU sampler's most) rather than the greedy top_k 1 a
bundle without sampler parameters has; and without a `seed` it draws one (OpenAI's behaviour: the same request
twice gives two samples; a seed repeats one). Unset fields take the bundle's values (Engine.default_sampler).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

from ..llm.sampling import SamplerConfig
from ..lowering.kernels.sampler import MAX_TOP_K

ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """A request the server refuses: HTTP status, message, the field (`param`), OpenAI's type and code."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error", code: str | None = None) -> None:  # noqa: A002
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = message, param, status, type, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class Request:
    """A checked request: the prompt (text, token ids or chat messages), the sampler, limits and options."""

    kind: str  # "completion" or "chat"
    model: str
    prompt: str | None = None
    prompt_ids: list[int] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # top alternatives per token (0: the chosen token's only); None: none asked
    response_format: dict[str, Any] | None = None


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object (a 400 naming where the JSON breaks, or that it is no object)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}", code="invalid_json")
    return body


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(f"`{name}` must be a finite number, got {value!r}", name)
    return float(value)


def _integer(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"`{name}` must be an integer, got {value!r}", name)
    return value


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(f"`{name}` must be true or false, got {value!r}", name)
    return value


def sampler(body: dict[str, Any], base: SamplerConfig) -> SamplerConfig:
    """The request's sampler over the bundle's (see the module docstring)."""
    temperature, top_p = _number(body, "temperature"), _number(body, "top_p")
    top_k, seed = _integer(body, "top_k"), _integer(body, "seed")
    if temperature is not None and temperature < 0:
        raise ApiError(f"`temperature` must be >= 0 (0 is greedy), got {temperature!r}", "temperature")
    if temperature is not None and temperature > 2:
        raise ApiError(f"`temperature` must be at most 2, got {temperature!r}", "temperature")
    if top_p is not None and not 0 < top_p <= 1:
        raise ApiError(f"`top_p` must be in (0, 1], got {top_p!r}", "top_p")
    if top_k is not None and not 1 <= top_k <= MAX_TOP_K:
        raise ApiError(f"`top_k` must be in [1, {MAX_TOP_K}], got {top_k!r}", "top_k")
    if seed is not None and not 0 <= seed < 2**32:
        raise ApiError(f"`seed` must be in [0, 2^32), got {seed!r}", "seed")
    config = base
    if temperature is not None:
        config = replace(config, temperature=temperature)
        if temperature > 0 and top_k is None and base.top_k == 1:
            config = replace(config, top_k=MAX_TOP_K)
    if top_p is not None:
        config = replace(config, top_p=top_p)
    if top_k is not None:
        config = replace(config, top_k=top_k)
    if seed is not None:
        config = replace(config, seed=seed)
    elif not config.greedy:
        config = replace(config, seed=random.getrandbits(32))
    return config


def _stop(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise ApiError(f"`stop` must be a non-empty string or a list of at most 4 of them, got {stop!r}", "stop")
    return stops


def _unsupported(body: dict[str, Any]) -> None:
    """Options this server does not implement, refused by name rather than ignored."""
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError(f"`n` must be 1 (one choice per request), got {n!r}", "n")
    best_of = body.get("best_of")
    if best_of is not None and best_of != 1:
        raise ApiError(f"`best_of` must be 1, got {best_of!r}", "best_of")
    for name in ("presence_penalty", "frequency_penalty"):
        value = _number(body, name)
        if value:
            raise ApiError(f"`{name}` is not supported (give 0 or leave it out)", name)
    if body.get("logit_bias"):
        raise ApiError("`logit_bias` is not supported", "logit_bias")
    if body.get("echo"):
        raise ApiError("`echo` is not supported", "echo")
    if body.get("suffix"):
        raise ApiError("`suffix` is not supported", "suffix")
    if body.get("tools") or body.get("functions"):
        name = "tools" if body.get("tools") else "functions"
        raise ApiError(f"`{name}` is not supported", name)


def _common(kind: str, body: dict[str, Any], base: SamplerConfig) -> Request:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(f"`model` must name the served model, got {model!r}", "model")
    _unsupported(body)
    max_tokens = _integer(body, "max_tokens")
    name = "max_tokens"
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        max_tokens, name = _integer(body, "max_completion_tokens"), "max_completion_tokens"
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(f"`{name}` must be an integer >= 1, got {max_tokens!r}", name)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(f"`stream_options` must be an object, got {options!r}", "stream_options")
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema", "regex",
                                                                "grammar"):
            raise ApiError("`response_format` must be an object whose type is text, json_object, json_schema (with "
                           "json_schema.schema), regex (with regex) or grammar (with a Lark grammar), got "
                           f"{_short(fmt)}", "response_format")
        if fmt["type"] == "text":
            fmt = None
    return Request(kind=kind, model=model, max_tokens=max_tokens, sampler=sampler(body, base), stop=_stop(body),
                   stream=_flag(body, "stream"), include_usage=bool(options and options.get("include_usage")),
                   response_format=fmt)


def completion(body: dict[str, Any], base: SamplerConfig) -> Request:
    """POST /v1/completions: `prompt` is raw text (fed after the start token, no template) or token ids."""
    request = _common("completion", body, base)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError("`prompt` is empty: give at least one character", "prompt")
        request.prompt = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        request.prompt_ids = list(prompt)
    else:
        raise ApiError("`prompt` must be a non-empty string or a list of token ids (one prompt per request), got "
                       f"{_short(prompt)}", "prompt")
    logprobs = body.get("logprobs")
    if logprobs is not None:
        if isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= 5:
            raise ApiError(f"`logprobs` must be an integer in [0, 5], got {logprobs!r}", "logprobs")
        request.logprobs = logprobs
    return request


def chat(body: dict[str, Any], base: SamplerConfig) -> Request:
    """POST /v1/chat/completions: `messages`, each with a known role and text content."""
    request = _common("chat", body, base)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(f"`messages` must be a non-empty list, got {_short(messages)}", "messages")
    checked = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ApiError(f"`messages[{i}]` must be an object, got {_short(m)}", f"messages[{i}]")
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(f"`messages[{i}].role` must be one of {', '.join(ROLES)}, got {role!r}",
                           f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ApiError(f"`messages[{i}].content` parts must be text parts ({{\"type\": \"text\", \"text\": "
                               "...}); this model reads text only", f"messages[{i}].content")
            content = "".join(p["text"] for p in content)
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise ApiError(f"`messages[{i}].content` must be a string, got {_short(content)}",
                           f"messages[{i}].content")
        checked.append({"role": role, "content": content})
    request.messages = checked
    if _flag(body, "logprobs"):
        top = _integer(body, "top_logprobs") or 0
        if not 0 <= top <= 20:
            raise ApiError(f"`top_logprobs` must be in [0, 20], got {top!r}", "top_logprobs")
        request.logprobs = top
    elif body.get("top_logprobs") is not None:
        raise ApiError("`top_logprobs` needs `logprobs: true`", "top_logprobs")
    return request


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class StopText:
    """Text pieces cut at the first stop string: what may still begin a stop string is held back until the next
    piece tells."""

    def __init__(self, stops: list[str]) -> None:
        self.stops, self.held, self.stopped = stops, "", False

    def push(self, piece: str) -> str:
        if self.stopped:
            return ""
        text = self.held + piece
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self.held = True, ""
            return text[:min(hits)]
        keep = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        self.held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        held, self.held = self.held, ""
        return "" if self.stopped else held
