"""One engine, many requests: a single worker thread owns the engine (and so the GPU) and steps the live
sessions' decode loops in turn, one token each per round, so that no request waits for another to finish. A new
request's prefill (the first step of its generator) runs between two rounds, before the others' next steps.

Admission is decided when a request arrives, never by running out of memory: each session costs the bytes
`session_bytes` reports (its KV cache); past `max_sessions` live sessions, or past `memory_limit` bytes of them,
`submit` raises Busy (the server's 429 with Retry-After). A request whose client went away is cancelled: the worker
closes its generator and its session before its next step.

Events go to each job's sink from the worker thread: ("token", id), then one ("end", finish_reason) or
("error", message). The sink must not block (the server's hands them to its event loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..llm.sampling import SamplerConfig

log = logging.getLogger("gpuengine.serve")

Event = tuple[str, Any]


class Busy(Exception):
    """No room for another session now (the server answers 429 with Retry-After: retry_after seconds)."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def session_bytes(engine: Any) -> int:
    """GPU memory one session holds: its KV cache (Session.memory_bytes() where sessions own their cache, else the
    size of decode's cache tensors, what each session's copy takes)."""
    probe = getattr(engine, "session_memory_bytes", None)
    if callable(probe):
        return int(probe())
    details = engine.decode.get_input_details()
    return sum(int(np.prod(details[n]["shape"])) * np.dtype(details[n]["dtype"]).itemsize for n in engine.cache_names)


@dataclass(eq=False)
class Job:
    """One request on the scheduler: the prompt's token ids, how many tokens at most, the sampler, and where its
    events go."""

    ids: list[int]
    max_tokens: int
    sampler: SamplerConfig
    sink: Callable[[Event], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    generated: int = 0
    submitted_at: float = field(default_factory=time.perf_counter)
    session: Any = None
    tokens: Iterator[int] | None = None

    def cancel(self) -> None:
        """The client went away: the worker frees the session before its next step."""
        self.cancelled.set()


class Scheduler:
    """The worker thread and its admission control (see the module docstring)."""

    def __init__(self, engine: Any, max_sessions: int = 8, memory_limit: int | None = None) -> None:
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
        self.engine = engine
        self.session_bytes = session_bytes(engine)
        self.memory_limit = memory_limit
        if memory_limit is not None:
            if memory_limit < self.session_bytes:
                raise ValueError(f"the memory limit of {memory_limit} bytes is less than one session's "
                                 f"{self.session_bytes} bytes (its KV cache)")
            max_sessions = min(max_sessions, memory_limit // self.session_bytes)
        self.max_sessions = max_sessions
        self._lock = threading.Condition()
        self._inbox: list[Job] = []
        self._live: list[Job] = []
        self._admitted = 0  # jobs in the inbox or live
        self._closing = False
        self.served = 0  # requests finished (any way)
        self._thread = threading.Thread(target=self._run, name="gpuengine-scheduler", daemon=True)
        self._thread.start()

    # -- the request side (any thread) ----------------------------------------------------------------------------
    @property
    def active(self) -> int:
        """Sessions admitted and not finished."""
        return self._admitted

    def submit(self, ids: list[int], max_tokens: int, sampler: SamplerConfig, sink: Callable[[Event], None]) -> Job:
        """Queue a request (Busy when max_sessions sessions are live, or their memory would pass the limit)."""
        job = Job(list(ids), max_tokens, sampler, sink)
        with self._lock:
            if self._closing:
                raise Busy("the server is shutting down", retry_after=5)
            if self._admitted >= self.max_sessions:
                limit = (f"{self.max_sessions} sessions of {self.session_bytes} bytes each" +
                         (f" within the memory limit of {self.memory_limit} bytes" if self.memory_limit else ""))
                raise Busy(f"all {limit} are in use; retry later")
            self._admitted += 1
            self._inbox.append(job)
            self._lock.notify()
        return job

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker: live requests end with an error event; sessions are freed."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join(timeout)

    def stats(self) -> dict[str, Any]:
        return {"active_sessions": self._admitted, "max_sessions": self.max_sessions,
                "session_bytes": self.session_bytes, "memory_limit": self.memory_limit, "served": self.served}

    # -- the worker -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._inbox and not self._live and not self._closing:
                    self._lock.wait()
                if self._closing:
                    jobs, self._inbox = [*self._inbox, *self._live], []
                    self._live = []
                    break
                new, self._inbox = self._inbox, []
            # a new request first: its prefill and first token between two rounds of the others
            for job in [*new, *self._live]:
                self._step(job, fresh=job in new)
        for job in jobs:
            self._finish(job, ("error", "the server is shutting down"))

    def _step(self, job: Job, fresh: bool) -> None:
        """One token of this job (its prefill and first token when fresh), or its end."""
        if fresh:
            self._live.append(job)
        if job.cancelled.is_set():
            self._finish(job, None)
            return
        try:
            if job.tokens is None:
                job.session = self.engine.create_session(apply_prompt_template=False, sampler_config=job.sampler)
                job.tokens = job.session.generate_tokens(job.ids, job.max_tokens)
            token = next(job.tokens)
        except StopIteration:
            reason = job.session.finish_reason
            self._finish(job, ("end", "length" if reason in ("length", "cache_full") else "stop"))
            return
        except Exception as e:  # a request's failure must not stop the server
            log.exception("request failed")
            self._finish(job, ("error", f"{type(e).__name__}: {e}"))
            return
        job.generated += 1
        if not self._emit(job, ("token", token)):
            self._finish(job, None)

    def _emit(self, job: Job, event: Event) -> bool:
        try:
            job.sink(event)
            return True
        except Exception:  # the client's event loop is gone: the request is cancelled
            job.cancel()
            return False

    def _finish(self, job: Job, event: Event | None) -> None:
        """Free the job's session at once (its generator closed, the session closed where sessions can be)."""
        if job in self._live:
            self._live.remove(job)
        try:
            if job.tokens is not None:
                job.tokens.close()  # type: ignore[attr-defined]
            close = getattr(job.session, "close", None)
            if callable(close):
                close()
        except Exception:
            log.exception("freeing a session failed")
        job.tokens = job.session = None
        with self._lock:
            self._admitted -= 1
            self.served += 1
        if event is not None:
            self._emit(job, event)
