"""One engine, many requests: a single worker thread owns the engine (and so the GPU) and steps the live
sessions' decode loops in turn, `quantum` tokens each per turn (1 by default), so that no request waits for another
to finish. A new request's prefill and first token (the first step of its generator) run as soon as the current
turn ends, before the other sessions' next turns.

Admission is decided when a request arrives, never by running out of memory: each session costs the bytes
`session_bytes` reports (its KV cache); past `max_sessions` live sessions, or past `memory_limit` bytes of them,
`submit` raises Busy (the server's 429 with Retry-After). A request whose client went away is cancelled: the worker
closes its generator and its session before its next step.

Events go to each job's sink from the worker thread: ("token", id) (after its ("logprob", TokenLogprob) when the
job asked for log-probabilities), then one ("end", finish_reason) or ("error", message). The sink must not block
(the server's hands them to its event loop).
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
    logprobs: int | None = None  # alternatives per token to report (None: no log-probabilities)
    constraint: Any = None  # a gpuengine.llm.structured.Constraint the reply follows
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

    def __init__(self, engine: Any, max_sessions: int = 8, memory_limit: int | None = None, quantum: int = 1,
                 prefix_cache: int = 0, min_prefix: int = 16) -> None:
        for name, value in (("max_sessions", max_sessions), ("quantum", quantum), ("min_prefix", min_prefix)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(prefix_cache, bool) or not isinstance(prefix_cache, int) or prefix_cache < 0:
            raise ValueError(f"prefix_cache must be an integer >= 0, got {prefix_cache!r}")
        self.quantum = quantum  # tokens a session generates per turn (more: a later first token for new requests)
        self.engine = engine
        self.session_bytes = session_bytes(engine)
        self.memory_limit = memory_limit
        # finished sessions kept for the prompts that start like theirs (most recently used last); their memory is
        # set aside from the limit up front
        self.prefix_cache, self.min_prefix = prefix_cache, min_prefix
        self._cached: list[Any] = []
        self.prefix_hits = self.prefix_tokens = 0  # requests that reused a cached prefix; the tokens not prefilled
        if memory_limit is not None:
            if memory_limit < self.session_bytes * (1 + prefix_cache):
                raise ValueError(f"the memory limit of {memory_limit} bytes is less than one session's "
                                 f"{self.session_bytes} bytes (its KV cache)" +
                                 (f" and {prefix_cache} cached ones" if prefix_cache else ""))
            max_sessions = min(max_sessions, memory_limit // self.session_bytes - prefix_cache)
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

    def submit(self, ids: list[int], max_tokens: int, sampler: SamplerConfig, sink: Callable[[Event], None], *,
               logprobs: int | None = None, constraint: Any = None) -> Job:
        """Queue a request (Busy when max_sessions sessions are live, or their memory would pass the limit)."""
        job = Job(list(ids), max_tokens, sampler, sink, logprobs, constraint)
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
        """Sessions, limits, requests served, and the GPU objects wgpu holds now (buffers and their bytes: what a
        leak would grow)."""
        import wgpu

        counts = wgpu.diagnostics.object_counts.get_dict()
        return {"active_sessions": self._admitted, "max_sessions": self.max_sessions,
                "session_bytes": self.session_bytes, "memory_limit": self.memory_limit, "quantum": self.quantum,
                "served": self.served, "prefix_cache": self.prefix_cache, "prefix_hits": self.prefix_hits,
                "prefix_tokens_reused": self.prefix_tokens, "gpu_buffers": counts["Buffer"]["count"],
                "gpu_bytes": counts["total"].get("resource_mem", 0)}

    # -- the worker -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        jobs: list[Job] = []
        while True:
            with self._lock:
                while not self._inbox and not self._live and not self._closing:
                    self._lock.wait()
                if self._closing:
                    jobs, self._inbox = [*self._inbox, *self._live], []
                    self._live = []
                    break
            for job in list(self._live):  # one round: each live session's turn
                self._admit()
                if job in self._live:
                    self._turn(job)
            self._admit()
        for job in jobs:
            self._finish(job, ("error", "the server is shutting down"))
        for session in self._cached:
            session.close()
        self._cached = []

    def _admit(self) -> None:
        """New requests' prefill and first token now, between two sessions' turns (not after a whole round)."""
        with self._lock:
            new, self._inbox = self._inbox, []
        for job in new:
            self._live.append(job)
            self._turn(job)

    def _turn(self, job: Job) -> None:
        for _ in range(self.quantum):
            if not self._step(job):
                return

    def _step(self, job: Job) -> bool:
        """One token of this job (its prefill and first token at first), or its end: False once it ended."""
        if job.cancelled.is_set():
            self._finish(job, None)
            return False
        try:
            if job.tokens is None:
                job.session, reused = self._session_for(job.ids)
                job.tokens = job.session.generate_tokens(job.ids[reused:], job.max_tokens, job.sampler,
                                                         logprobs=job.logprobs, constraint=job.constraint)
            token = next(job.tokens)
        except StopIteration:
            reason = job.session.finish_reason
            self._finish(job, ("end", "length" if reason in ("length", "cache_full") else "stop"), keep=True)
            return False
        except Exception as e:  # a request's failure must not stop the server
            log.exception("request failed")
            self._finish(job, ("error", f"{type(e).__name__}: {e}"))
            return False
        job.generated += 1
        if job.logprobs is not None and not self._emit(job, ("logprob", job.session.logprobs[-1])):
            self._finish(job, None)
            return False
        if not self._emit(job, ("token", token)):
            self._finish(job, None)
            return False
        return True

    def _session_for(self, ids: list[int]) -> tuple[Any, int]:
        """A session for a prompt, and how many of its first tokens it holds already: a clone of the cached session
        sharing the longest prefix with it (at least min_prefix tokens, at most all but the last), rewound to that
        prefix, on the GPU; else a new one."""
        best, length = None, 0
        for cached in self._cached:
            held = cached.history[:cached.position]  # the tokens whose keys and values are in its cache
            n = 0
            for a, b in zip(held, ids[:-1]):
                if a != b:
                    break
                n += 1
            if n > length:
                best, length = cached, n
        if best is None or length < self.min_prefix:
            return self.engine.create_session(apply_prompt_template=False), 0
        self._cached.remove(best)
        self._cached.append(best)
        session = best.clone()
        session.rewind(length)
        session.steps = 0  # the sampler's draws count from 0, as in a new session (same seed, same text)
        self.prefix_hits += 1
        self.prefix_tokens += length
        return session, length

    def _keep(self, session: Any) -> bool:
        """Keep a finished session for its prefix (the least recently used one out when the cache is full)."""
        if not self.prefix_cache or session is None or session.closed or session.position < self.min_prefix:
            return False
        self._cached.append(session)
        while len(self._cached) > self.prefix_cache:
            self._cached.pop(0).close()
        return True

    def _emit(self, job: Job, event: Event) -> bool:
        try:
            job.sink(event)
            return True
        except Exception:  # the client's event loop is gone: the request is cancelled
            job.cancel()
            return False

    def _finish(self, job: Job, event: Event | None, keep: bool = False) -> None:
        """Free the job's session at once (its generator closed, the session closed), or keep it for its prefix
        (a reply that ended, with prefix_cache on)."""
        if job in self._live:
            self._live.remove(job)
        try:
            if job.tokens is not None:
                job.tokens.close()  # type: ignore[attr-defined]
            if not (keep and self._keep(job.session)) and job.session is not None:
                job.session.close()
        except Exception:
            log.exception("freeing a session failed")
        job.tokens = job.session = None
        with self._lock:
            self._admitted -= 1
            self.served += 1
        if event is not None:
            self._emit(job, event)
