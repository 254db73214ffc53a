"""Structured output: a reply held to a JSON schema, a regular expression or a Lark grammar token by token with
llguidance (LiteRT-LM's constrained decoding library): before each token is sampled, the tokens the grammar
forbids are left out (llguidance's bitmask: uploaded for the GPU loop's sampler kernel, which draws only tokens
set in it; applied as -inf logits in numpy where the host loop samples: the same tokens); the grammar takes the
sampled token; the reply ends when the grammar is complete (its stop token, or nothing more it accepts). The GPU
loop keeps one step in flight then: the next mask needs this token.

llguidance matches the tokenizer's bytes: a Hugging Face tokenizer through its tokenizer.json, a SentencePiece one
through the bytes each piece spells (Tokenizer.token_bytes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .tokenizer import HuggingFaceTokenizer, SentencePieceTokenizer, Tokenizer

# JSON written compactly (no whitespace between tokens) unless the schema's "x-guidance" says
# otherwise: a model may not pad a reply with whitespace until max_tokens cuts it
JSON_DEFAULTS = {"whitespace_flexible": False}


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as e:
        raise ImportError("structured output needs `llguidance` (pip install 'gpuengine[llm]')") from e
    return llguidance


class _PieceTokens:
    """llguidance's TokenizerWrapper interface over a SentencePiece tokenizer (its tokens' bytes and encode)."""

    def __init__(self, tokenizer: SentencePieceTokenizer, stop: list[int]) -> None:
        self.tokenizer = tokenizer
        self.tokens, self.special_token_ids = tokenizer.token_bytes()
        self.eos_token_id = stop[0] if stop else tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self.tokenizer.encode_plain(text)


def guidance_tokenizer(tokenizer: Tokenizer, stop: list[int]) -> Any:
    """An llguidance LLTokenizer for this tokenizer, `stop` its end-of-reply tokens (slow to build: cache it)."""
    llguidance = _llguidance()
    vocab = tokenizer.vocab_size
    if isinstance(tokenizer, HuggingFaceTokenizer):
        return llguidance.LLTokenizer(tokenizer.to_json(), n_vocab=vocab, eos_token=stop or None)
    if isinstance(tokenizer, SentencePieceTokenizer):
        wrapper = llguidance.TokenizerWrapper(_PieceTokens(tokenizer, stop))
        return llguidance.LLTokenizer(wrapper, n_vocab=vocab, eos_token=stop or None)
    raise ValueError("structured output needs a SentencePiece or Hugging Face tokenizer, got "
                     f"{type(tokenizer).__name__}")


class Constraint:
    """One reply's grammar state: allowed() -> the boolean mask of tokens it accepts next, consume(token), stopped.
    Made with Constraint.json_schema / regex / lark (or from_response_format), for one engine's tokenizer."""

    def __init__(self, tokenizer: Any, grammar: str, what: str) -> None:
        llguidance = _llguidance()
        self.what = what
        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"{what}: {self.matcher.get_error()}")
        self.vocab = tokenizer.vocab_size
        self._mask = np.zeros(-(-self.vocab // 32), np.int32)
        self._bits = np.arange(32, dtype=np.int32)

    @classmethod
    def json_schema(cls, engine: Any, schema: Mapping[str, Any] | str | None = None) -> Constraint:
        """Any JSON value (schema None), or one following `schema` (a dict or its JSON text)."""
        llguidance = _llguidance()
        if schema is None:
            schema = {}
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema if isinstance(schema, str) else json.dumps(schema), defaults=JSON_DEFAULTS)
        except ValueError as e:
            raise ValueError(f"response_format json_schema: not a JSON object ({e})") from e
        return cls(engine.guidance_tokenizer(), grammar, "response_format json_schema")

    @classmethod
    def regex(cls, engine: Any, pattern: str) -> Constraint:
        return cls(engine.guidance_tokenizer(), _llguidance().LLMatcher.grammar_from_regex(pattern),
                   "response_format regex")

    @classmethod
    def lark(cls, engine: Any, grammar: str) -> Constraint:
        return cls(engine.guidance_tokenizer(), _llguidance().LLMatcher.grammar_from_lark(grammar),
                   "response_format grammar")

    @classmethod
    def from_response_format(cls, engine: Any, response_format: Mapping[str, Any] | None) -> Constraint | None:
        """OpenAI's response_format: {"type": "text"} (None: no constraint), {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"schema": {...}}}; and {"type": "regex", "regex": ...},
        {"type": "grammar", "grammar": LARK}. ValueError naming what is wrong."""
        if response_format is None:
            return None
        if not isinstance(response_format, Mapping):
            raise ValueError(f"response_format must be an object, got {type(response_format).__name__}")
        kind = response_format.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls.json_schema(engine, {"type": "object"})
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, Mapping) else None
            if not isinstance(schema, (Mapping, str)):
                raise ValueError("response_format json_schema: give {'json_schema': {'schema': {...}}}")
            return cls.json_schema(engine, schema)
        if kind == "regex" and isinstance(response_format.get("regex"), str):
            return cls.regex(engine, response_format["regex"])
        if kind == "grammar" and isinstance(response_format.get("grammar"), str):
            return cls.lark(engine, response_format["grammar"])
        raise ValueError(f"response_format type {kind!r} is not one of text, json_object, json_schema, regex "
                         "(with 'regex'), grammar (with 'grammar': a Lark grammar)")

    def bitmask(self) -> np.ndarray:
        """The tokens the grammar accepts next as llguidance's bitmask: bit j % 32 of int32 word j // 32 (what
        the GPU sampler reads)."""
        self.matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        return self._mask

    def allowed(self) -> np.ndarray:
        """The tokens the grammar accepts next, as booleans (the host loop's mask)."""
        bits = (self.bitmask()[:, None] >> self._bits) & 1
        return bits.reshape(-1)[:self.vocab].astype(bool)

    def consume(self, token: int) -> None:
        if not self.matcher.consume_token(int(token)):
            raise RuntimeError(f"{self.what}: the grammar rejected token {token} ({self.matcher.get_error()})")

    @property
    def stopped(self) -> bool:
        """The grammar takes nothing more (complete)."""
        return self.matcher.is_stopped()
