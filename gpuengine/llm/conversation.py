"""A Conversation: messages in, assistant messages out, the history kept in one session's KV cache.

As LiteRT-LM's Conversation does, each message adds the text the chat template renders for the history plus the
message (with the generation prompt) beyond what it rendered for the history alone: only that part is tokenized
and prefilled. When the template renders the earlier turns differently once the new message is there (a template
that moves the system prompt, or drops earlier reasoning), the text in the cache and the new rendering part ways:
the session rewinds to the last point where they agree (the end of an earlier fed part) and prefills the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .chat import ChatTemplate, normalize_message
from .sampling import SamplerConfig
from .tokenizer import StreamDecoder

if TYPE_CHECKING:  # engine.py creates conversations (Engine.create_conversation)
    from .engine import Engine, Session


class Conversation:
    """engine.create_conversation(system_message=...): send_message({"role": "user", "content": ...}) -> the
    assistant's message {"role": "assistant", "content": text}; send_message_stream yields its text as it comes."""

    def __init__(self, engine: Engine, template: ChatTemplate, *, system_message: str | None = None,
                 messages: Sequence[Any] | None = None, tools: Sequence[Any] | None = None,
                 sampler_config: SamplerConfig | None = None, max_tokens: int = 256, loop: str | None = None) -> None:
        self.engine, self.template, self.tools, self.max_tokens = engine, template, list(tools or []), max_tokens
        self.messages: list[dict[str, Any]] = []
        if system_message:
            self.messages.append({"role": "system", "content": system_message})
        self.messages.extend(normalize_message(m) for m in messages or [])
        self.session: Session = engine.create_session(apply_prompt_template=False, sampler_config=sampler_config,
                                                      loop=loop)
        self.rendered = ""  # the text in the KV cache: the history as rendered without a generation prompt
        # (text length, tokens): where a fed part ended, the cache's first `tokens` tokens hold rendered[:length]
        self.checkpoints: list[tuple[int, int]] = [(0, 0)]
        self.finish_reason: str | None = None

    def render_message(self, message: Any) -> str:
        """The text `message` adds to the prompt (what LiteRT-LM's render_message_to_string returns): the
        rendering of the history plus the message, with the generation prompt, past the history's."""
        full = self.template.render([*self.messages, normalize_message(message)], True, self.tools)
        return full[len(self.rendered):] if full.startswith(self.rendered) else full

    def send_message(self, message: Any, *, max_tokens: int | None = None, sampler_config: SamplerConfig | None = None,
                     response_format: dict[str, Any] | None = None, logprobs: int | None = None) -> dict[str, Any]:
        """The assistant's reply to `message` (a dict with role and content, or a user message's text)."""
        text = "".join(self.send_message_stream(message, max_tokens=max_tokens, sampler_config=sampler_config,
                                                response_format=response_format, logprobs=logprobs))
        return {"role": "assistant", "content": text}

    def send_message_stream(self, message: Any, *, max_tokens: int | None = None,
                            sampler_config: SamplerConfig | None = None, response_format: dict[str, Any] | None = None,
                            logprobs: int | None = None) -> Iterator[str]:
        """The reply's text pieces as tokens arrive; the history takes the reply when the stream ends (or is
        closed: the text so far). response_format: OpenAI's (json_object, json_schema; regex, grammar), held
        token by token (structured.py); logprobs: session.logprobs gets the reply's (Session.generate_tokens)."""
        message = normalize_message(message)
        constraint = self.engine.constraint(response_format)
        full = self.template.render([*self.messages, message], True, self.tools)
        ids = self._feed_plan(full)
        tokens = self.session.generate_tokens(ids, max_tokens or self.max_tokens, sampler_config, logprobs=logprobs,
                                              constraint=constraint)
        return self._stream(message, full, len(ids), tokens)

    def _feed_plan(self, full: str) -> list[int]:
        """The token ids to feed for rendered prompt `full`: the part past the cache's text, after rewinding the
        session to the last checkpoint the new rendering agrees with."""
        session, engine = self.session, self.engine
        agree = 0
        limit = min(len(full), len(self.rendered))
        while agree < limit and full[agree] == self.rendered[agree]:
            agree += 1
        if agree < len(self.rendered):  # the template renders the history differently now
            length, tokens = max(c for c in self.checkpoints if c[0] <= agree)
            session.rewind(min(tokens, session.position))
            self.checkpoints = [c for c in self.checkpoints if c[0] <= length]
            self.rendered = full[:length]
        piece = full[len(self.rendered):]
        ids = engine.tokenizer.encode(piece) if piece else []
        if session.position == 0 and not session.pending:
            ids = [*engine.bundle.start_ids, *ids]
        if not ids and not session.pending:
            raise ValueError("the message adds nothing to the prompt: its rendering is empty")
        return ids

    def _stream(self, message: dict[str, Any], full: str, fed: int, tokens: Iterator[int]) -> Iterator[str]:
        session, engine = self.session, self.engine
        stop = engine.bundle.stop_tokens
        decoder = StreamDecoder(engine.tokenizer)
        reply: list[str] = []
        start = session.position + len(session.pending)
        try:
            for token in tokens:
                if token in stop:
                    break
                piece = decoder.push(token)
                if piece:
                    reply.append(piece)
                    yield piece
            rest = decoder.flush()
            if rest:
                reply.append(rest)
                yield rest
        finally:
            self.finish_reason = session.finish_reason
            self.checkpoints.append((len(full), start + fed))
            self.messages += [message, {"role": "assistant", "content": "".join(reply)}]
            self.rendered = self.template.render(self.messages, False, self.tools)

    @property
    def token_count(self) -> int:
        """Tokens of the conversation so far (fed or generated; LiteRT-LM's Conversation.token_count)."""
        return len(self.session.history)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
