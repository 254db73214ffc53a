"""The OpenAI-compatible HTTP server: a FastAPI app over one Engine and its Scheduler.

GET /health, GET /v1/models, POST /v1/completions (the prompt as raw text: the start token, then its tokens, no
template, as `gpuengine generate --no-template`), POST /v1/chat/completions (the messages rendered with the bundle's
chat template, gpuengine.llm.chat: its Jinja template, its prefix/suffix affixes, or LiteRT-LM's plain fallback).
`stream: true` answers server-sent events in OpenAI's chunk format ending with `data: [DONE]`. Every refusal is
OpenAI's error body {"error": {"message", "type", "param", "code"}}: 400 for a bad field (named in `param`), 404 for
an unknown model or path, 429 with Retry-After when no session is free. A client that goes away mid-request cancels
its job: the worker frees its session before its next step.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest

from ..llm.chat import ChatTemplate, TemplateError
from ..llm.tokenizer import StreamDecoder
from . import protocol
from .protocol import ApiError, StopText
from .scheduler import Busy, Job, Scheduler

log = logging.getLogger("gpuengine.serve")
POLL_S = 0.5  # how often a waiting non-streamed request checks that its client is still there


class Server:
    """What the app serves: the engine under its scheduler, and the name clients give as `model`."""

    def __init__(self, engine: Any, model_name: str, max_sessions: int = 8, memory_limit: int | None = None,
                 quantum: int = 1, prefix_cache: int = 0) -> None:
        self.engine, self.model_name = engine, model_name
        self.scheduler = Scheduler(engine, max_sessions, memory_limit, quantum, prefix_cache)
        self.chat_template = ChatTemplate.for_bundle(engine.bundle)  # Jinja, affixes, or the plain fallback
        self.created = int(time.time())

    def close(self) -> None:
        self.scheduler.close()

    # -- requests to token ids --------------------------------------------------------------------------------
    def prompt_ids(self, request: protocol.Request) -> list[int]:
        """The tokens the request feeds, checked against the vocabulary and the KV cache (400s naming the field)."""
        engine, bundle = self.engine, self.engine.bundle
        field = "prompt" if request.kind == "completion" else "messages"
        if request.kind == "chat":
            # OpenAI's "developer" role is the system prompt of older models
            messages = [{**m, "role": "system"} if m["role"] == "developer" else m for m in request.messages]
            try:
                text = self.chat_template.render(messages, add_generation_prompt=True)
            except TemplateError as e:
                raise ApiError(f"the chat template failed on these messages: {e}", "messages",
                               code="template_error") from None
            except ValueError as e:
                raise ApiError(f"`messages`: {e}", "messages") from None
            ids = list(bundle.start_ids) + bundle.tokenizer.encode(text)
        elif request.prompt_ids is not None:
            ids = request.prompt_ids
            bad = [t for t in ids if not 0 <= t < engine.vocab]
            if bad:
                raise ApiError(f"token id {bad[0]} in `prompt` is outside the vocabulary [0, {engine.vocab - 1}]",
                               "prompt")
        else:
            try:
                ids = list(bundle.start_ids) + bundle.tokenizer.encode(request.prompt)
            except ValueError as e:
                raise ApiError(f"`prompt`: {e}", "prompt") from None
        if len(ids) > engine.cache_length:
            raise ApiError(f"the {field} takes {len(ids)} tokens; the model's KV cache holds {engine.cache_length} "
                           "(prompt and reply together)", field, code="context_length_exceeded")
        return ids

    def check(self, request: protocol.Request) -> None:
        if request.model != self.model_name:
            raise ApiError(f"the model {request.model!r} does not exist; this server serves {self.model_name!r}",
                           "model", status=404, code="model_not_found")

    def constraint(self, request: protocol.Request) -> Any:
        """The structured-output constraint of `response_format` (gpuengine.llm.structured; None for none): a
        400 naming the field when the schema or grammar is refused."""
        if request.response_format is None:
            return None
        try:
            return self.engine.constraint(request.response_format)
        except ImportError as e:
            raise ApiError(f"`response_format` needs structured output, which needs llguidance: {e}",
                           "response_format", code="unsupported") from None
        except (ValueError, TypeError, RuntimeError) as e:
            raise ApiError(f"`response_format`: {e}", "response_format") from None

    def token_text(self, token: int) -> str:
        return self.engine.tokenizer.decode([token])

    def logprobs(self, kind: str, entries: list[Any], offset: int) -> dict[str, Any]:
        """OpenAI's logprobs object for these tokens' TokenLogprobs: chat's {"content": [...]}, or the completion's
        tokens / token_logprobs / top_logprobs / text_offset (offsets from `offset` in the reply's text)."""
        if kind == "chat":
            def item(token: int, logprob: float) -> dict[str, Any]:
                text = self.token_text(token)
                return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

            return {"content": [{**item(e.token, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]}
                                for e in entries]}
        tokens = [self.token_text(e.token) for e in entries]
        offsets = []
        for text in tokens:
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [{self.token_text(t): lp for t, lp in e.top} for e in entries],
                "text_offset": offsets}


class Reply:
    """A job's events as text: tokens decoded as a stream (a stop token ends it and is not shown, as
    Session.generate_stream), cut at a stop string (the job is cancelled there)."""

    def __init__(self, server: Server, job: Job, queue: asyncio.Queue, stops: list[str]) -> None:
        self.job, self.queue = job, queue
        self.stop_tokens = server.engine.bundle.stop_tokens
        self.text = StreamDecoder(server.engine.tokenizer)
        self.stop = StopText(stops)
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.logprobs: list[Any] = []  # the TokenLogprobs of the shown tokens so far (when the request asked)
        self._logprob: Any = None

    async def pieces(self, request: HttpRequest | None = None) -> AsyncIterator[tuple[str, list[Any]]]:
        """(text, the TokenLogprobs of the tokens that came with it) until the reply ends (finish_reason set);
        ApiError(500) on a failure in the engine."""
        ended = False
        while not ended:
            try:
                events = [await asyncio.wait_for(self.queue.get(), POLL_S)]
            except asyncio.TimeoutError:
                if request is not None and await request.is_disconnected():
                    self.job.cancel()
                    return
                continue
            while not self.queue.empty():  # the tokens that came meanwhile go out as one piece (a busy server)
                events.append(self.queue.get_nowait())
            out, logprobs = "", []
            for kind, value in events:
                if kind == "logprob":
                    self._logprob = value
                    continue
                if kind == "error":
                    raise ApiError(f"generation failed: {value}", None, status=500, type="server_error")
                if kind == "end":
                    self.finish_reason = self.finish_reason or value
                    out += self.stop.push(self.text.flush()) + self.stop.flush()
                    ended = True
                else:
                    self.completion_tokens += 1
                    if value not in self.stop_tokens:  # a stop token ends the reply (the end event follows)
                        out += self.stop.push(self.text.push(value))
                        if self._logprob is not None:
                            logprobs.append(self._logprob)
                    self._logprob = None
                if self.stop.stopped:
                    self.job.cancel()
                    self.finish_reason = "stop"
                    ended = True
                if ended:
                    break
            self.logprobs.extend(logprobs)
            if out or logprobs:
                yield out, logprobs


def _error(e: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


def build_app(server: Server) -> FastAPI:
    """The FastAPI app serving `server` (its scheduler is closed at the app's shutdown)."""
    app = FastAPI(title="gpuengine", docs_url=None, redoc_url=None, openapi_url=None)
    app.router.add_event_handler("shutdown", server.close)

    @app.exception_handler(ApiError)
    async def api_error(_: HttpRequest, e: ApiError) -> JSONResponse:
        return _error(e)

    @app.exception_handler(HTTPException)
    async def http_error(request: HttpRequest, e: HTTPException) -> JSONResponse:
        kind = "not_found" if e.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {e.detail}"
        return _error(ApiError(message, None, status=e.status_code, type=kind))

    @app.exception_handler(Exception)
    async def internal_error(_: HttpRequest, e: Exception) -> JSONResponse:
        log.exception("internal error")
        return _error(ApiError(f"internal error: {type(e).__name__}: {e}", None, status=500, type="server_error"))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": server.model_name, **server.scheduler.stats()}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "created": server.created,
                                            "owned_by": "gpuengine"}]}

    @app.post("/v1/completions")
    async def completions(http: HttpRequest) -> Any:
        request = protocol.completion(protocol.parse_json(await http.body()), server.engine.default_sampler)
        return await answer(http, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HttpRequest) -> Any:
        request = protocol.chat(protocol.parse_json(await http.body()), server.engine.default_sampler)
        return await answer(http, request)

    async def answer(http: HttpRequest, request: protocol.Request) -> Any:
        server.check(request)
        ids = server.prompt_ids(request)
        # llguidance builds its tokenizer view (once) and the grammar: off the event loop
        constraint = await asyncio.to_thread(server.constraint, request)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def sink(event: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        max_tokens = request.max_tokens or server.engine.cache_length
        try:
            job = server.scheduler.submit(ids, max_tokens, request.sampler, sink, logprobs=request.logprobs,
                                          constraint=constraint)
        except Busy as e:
            return _error(ApiError(str(e), None, status=429, type="rate_limit_error", code="server_busy"),
                          headers={"Retry-After": str(e.retry_after)})
        reply = Reply(server, job, queue, request.stop)
        chat = request.kind == "chat"
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        head = {"id": ident, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": server.model_name}

        def usage() -> dict[str, int]:
            return {"prompt_tokens": len(ids), "completion_tokens": reply.completion_tokens,
                    "total_tokens": len(ids) + reply.completion_tokens}

        if not request.stream:
            try:
                text = "".join([p async for p, _ in reply.pieces(http)])
            finally:
                job.cancel()  # nothing once the job has ended; frees the session when the client went away
            logprobs = None if request.logprobs is None else server.logprobs(request.kind, reply.logprobs, 0)
            choice: dict[str, Any] = {"index": 0, "finish_reason": reply.finish_reason, "logprobs": logprobs}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return {**head, "choices": [choice], "usage": usage()}

        head["object"] = "chat.completion.chunk" if chat else "text_completion"

        sent = 0  # characters of the reply sent (the completion's text_offset)

        def chunk(piece: str | None, finish: str | None, first: bool = False, logprobs: list[Any] | None = None
                  ) -> str:
            nonlocal sent
            lp = server.logprobs(request.kind, logprobs, sent) if logprobs else None
            sent += len(piece or "")
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
                if piece:
                    delta["content"] = piece
                choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": piece or "", "logprobs": lp, "finish_reason": finish}
            return f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"

        async def events() -> AsyncIterator[str]:
            try:
                if chat:
                    yield chunk(None, None, first=True)
                try:
                    async for piece, logprobs in reply.pieces():
                        yield chunk(piece, None, logprobs=logprobs)
                except ApiError as e:
                    yield f"data: {json.dumps(e.body())}\n\n"
                else:
                    yield chunk(None, reply.finish_reason)
                    if request.include_usage:
                        yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage()})}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                job.cancel()  # the client went away (the response task is cancelled) or the reply ended

        # the background task runs when the response ends, also when the client left before the stream started
        return StreamingResponse(events(), media_type="text/event-stream", background=BackgroundTask(job.cancel),
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app
