"""The language-model layer above the Interpreter: an Engine opened from a bundle, Sessions that keep the KV cache
across turns, generate() / generate_stream(), and the two decode loops.

The model is driven through the Interpreter's public API: signature runners, their GPU buffers (output_buffer /
input_buffer / set_input_buffer), and their compiled GPU programs (GpuProgram.bind_buffers / submit(bindings=)).

State: each Session owns its KV cache on the GPU (and, in the GPU loop, its token and position and its sampler's
state and staging ring) and its own bind groups for the decode and prefill programs, made once when it is created
(GpuProgram.bind_buffers): a cache written in place (passes/kv_cache_in_place.py) is bound as the programs' input
and output; one that is not is bound as the input and the program's output copied back into it in the same
submission. A step of a session is one submission with its bind groups, so generators of several sessions stepped
in any order each get the tokens they get alone and a switch between sessions queues nothing. Where a signature is
not one GPU program the cache goes through the host instead (each session keeps its arrays).

As LiteRT-LM does, a prompt's tokens but the last go through the
`prefill_N` signatures (chunks whose N positions fit in the cache; the rest one by one through `decode`) and the
last one is the first decode step's input, whose logits give the first generated token.

The GPU loop (the default where `tokens` and `input_pos` of `decode` are GPU inputs): each step is the decode
signature followed, in the same submission, by the sampler kernel (lowering/kernels/sampler.py), which writes the next
token and position where the next step reads them and appends the token to a history buffer; 4 bytes of it are
copied to a small staging buffer per step. `steps_ahead` steps are in flight; the host maps the oldest staging
buffer (4 bytes) to stream its token. The host loop reads each step's logits back and samples in numpy
(sampling.py): the same tokens for the same seed.
"""

from __future__ import annotations

import os
import re
import time
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ModelError
from ..lowering.kernels import sampler as sampler_kernel
from ..runtime.added_dispatch import read_words, readback_buffer, state_buffer
from ..runtime.device import WorkDone
from .bundle import Bundle, open_bundle, prompt_tokens
from .sampling import SamplerConfig, sample
from .tokenizer import StreamDecoder

if TYPE_CHECKING:
    from .conversation import Conversation

PREFILL = re.compile(r"^prefill(?:_(\d+))?$")
LOOPS = ("auto", "gpu", "host")
MAX_TOP_LOGPROBS = 20  # alternatives per token, at most (OpenAI's top_logprobs bound)
STAGING_BYTES = 16  # one readback buffer of a session's GPU-loop ring (4 bytes read: its token)


@dataclass
class LoopStats:
    """What the last generation did on the host's side of the GPU (the structure the tests check)."""

    loop: str = ""
    steps: int = 0  # decode steps submitted
    reads: int = 0  # host waits for a GPU result (token ids, or logits in the host loop)
    bytes_read: int = 0  # bytes the host read back during the decode loop
    uploads: int = 0  # host writes during the decode loop (after the first token)
    bytes_uploaded: int = 0  # bytes of those writes that the GPU loop makes (a constraint's masks)
    max_in_flight: int = 0  # decode steps submitted and not yet read back, at most


@dataclass
class Timing:
    prefill_tokens: int = 0
    prefill_s: float = 0.0  # prompt submitted until the first generated token is on the host
    decode_tokens: int = 0
    decode_s: float = 0.0

    @property
    def ttft_s(self) -> float:
        return self.prefill_s


@dataclass
class TokenLogprob:
    """A generated token's log-probability under the model (log-softmax of its logits, before any sampling
    setting or constraint) and the `top` most likely tokens with theirs (OpenAI's logprobs / top_logprobs)."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of a row of logits, in float64."""
    x = np.asarray(logits, np.float64).reshape(-1)
    finite = x[np.isfinite(x)]
    peak = finite.max() if finite.size else 0.0
    return x - (peak + np.log(np.exp(x[np.isfinite(x)] - peak).sum()))


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    lp = np.nan_to_num(log_softmax(logits), nan=-np.inf)
    best = np.lexsort((np.arange(lp.size), -lp))[:top] if top else []
    return TokenLogprob(int(token), float(lp[token]), [(int(t), float(lp[t])) for t in best])


def _cache_length(k_shape: tuple[int, ...], v_shape: tuple[int, ...], longest_prefill: int) -> int:
    """Positions of a litert-torch KV cache: K and V of one shape, [1, T, N, H] (BTNH, litert-torch's default) or
    [1, N, T, H] (the dimension that holds the longest prefill, BTNH when both do), or the transposed layout
    (K [1, N, H, T], V [1, N, T, H])."""
    if tuple(k_shape) != tuple(v_shape):
        return int(k_shape[-1])
    if len(k_shape) == 4 and k_shape[1] < longest_prefill <= k_shape[2]:
        return int(k_shape[2])
    return int(k_shape[1])


def chunk_plan(count: int, start: int, lengths: list[int], cache_length: int) -> list[tuple[int, int]]:
    """How `count` prompt tokens from position `start` go into the cache: (N, tokens) per prefill_N call, padded
    to N, or (0, 1) for a token through decode. A call writes N positions (the cache update of litert-torch is
    one DYNAMIC_UPDATE_SLICE, clamped to fit), so a chunk must fit whole: start + N <= cache_length."""
    plan, k = [], 0
    while k < count:
        left, at = count - k, start + k
        fits = [n for n in lengths if at + n <= cache_length and n > 1]
        whole = [n for n in fits if n >= left]
        n = min(whole) if whole else (max(fits) if fits else 0)
        take = min(n, left) if n else 1
        plan.append((n, take))
        k += take
    return plan


def position_ranges(shape: tuple[int, ...], positions: int, start: int, end: int) -> list[tuple[int, int]] | None:
    """The byte ranges (offset, size) of cache positions [start, end) in a row-major f32 buffer of `shape` whose
    one axis of `positions` entries is the position axis: one range for [1, T, N, H], N for [1, N, T, H], N x H for
    a transposed [1, N, H, T] (None past 64 ranges, or when no single axis is the positions': copy it whole)."""
    axes = [ax for ax in range(1, len(shape)) if shape[ax] == positions]
    if len(shape) != 4 or len(axes) != 1 or start >= end:
        return None if start < end else []
    axis = axes[0]
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    outer = int(np.prod(shape[1:axis], dtype=np.int64))
    if outer > 64:
        return None
    span = positions * inner
    return [((o * span + start * inner) * 4, (end - start) * inner * 4) for o in range(outer)]


def default_hybrid_arithmetic() -> str:
    """The LLM layer's hybrid arithmetic when none is given: GPUENGINE_HYBRID, else "float" (LiteRT-LM's)."""
    from .. import settings

    return settings.get(settings.HYBRID) or "float"


class Engine:
    """A language model opened from a `.litertlm` bundle, a MediaPipe `.task` or a `.tflite` plus a tokenizer.

    engine = Engine("model.litertlm"); print(engine.create_session().generate("Hello", max_tokens=32))
    Interpreter options (precision, adapter, ...) pass through; steps_ahead: decode steps in flight in the GPU
    loop; loop: "auto" (the GPU loop where the model allows it), "gpu" or "host"; progress: a tqdm bar on stderr
    while the signatures compile. model_path may name a zoo decoder (`decoder_tiny`): a zoo bundle, no files.

    hybrid_arithmetic defaults to "float" here (env GPUENGINE_HYBRID still applies): hybrid int8 FULLY_CONNECTED
    with float activations against int8 weights, what LiteRT-LM's CPU engine computes, so the text is LiteRT-LM's;
    "integer" reproduces LiteRT's Interpreter (rows quantized, i32 sums), the Interpreter's own default.
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer: str | os.PathLike | None = None, *,
                 sampler: SamplerConfig | None = None, steps_ahead: int = 4, loop: str = "auto",
                 progress: bool = False, bundle: Bundle | None = None, **options: Any) -> None:
        from ..api.interpreter import Interpreter

        if loop not in LOOPS:
            raise ValueError(f"loop must be one of {LOOPS}, got {loop!r}")
        if isinstance(steps_ahead, bool) or not isinstance(steps_ahead, int) or steps_ahead < 1:
            raise ValueError(f"steps_ahead must be an integer >= 1, got {steps_ahead!r}")
        self.bundle = bundle if bundle is not None else open_bundle(model_path, tokenizer)
        self.tokenizer = self.bundle.tokenizer
        options["hybrid_arithmetic"] = options.get("hybrid_arithmetic") or default_hybrid_arithmetic()
        try:
            self.interpreter = Interpreter(model_content=self.bundle.model, **options)
        except ModelError as e:
            raise ModelError(f"{self.bundle.source}: TFLiteModel section: {e}") from e
        self.steps_ahead = steps_ahead
        self._find_signatures()
        self.default_sampler = sampler or self._metadata_sampler()
        self._compile(progress)
        self._bind_state()
        want_gpu = loop in ("auto", "gpu")
        self.loop = "gpu" if want_gpu and self.gpu_loop_reason is None else "host"
        if loop == "gpu" and self.gpu_loop_reason is not None:
            raise ValueError(f"the GPU decode loop is not available for this model: {self.gpu_loop_reason}")
        self.stats = LoopStats()
        self.timing = Timing()
        self._owner: weakref.ref[Session] | None = None  # the session that submitted last
        self.sessions: weakref.WeakSet[Session] = weakref.WeakSet()  # sessions created and not closed
        self.switches = 0  # changes of the session submitting (activate): nothing is copied for them
        self.swap_bytes = 0  # bytes copied between sessions' caches on the GPU (clones; a switch copies none)
        self._guidance: Any = None  # llguidance's tokenizer, built on first use (structured output)

    # -- set-up ---------------------------------------------------------------------------------------------
    def _metadata_sampler(self) -> SamplerConfig:
        """The bundle's sampler parameters (top_k clamped to what the GPU sampler keeps); greedy without them."""
        from ..lowering.kernels.sampler import MAX_TOP_K

        p = self.bundle.sampler
        if not p:
            return SamplerConfig()
        try:
            return SamplerConfig(top_k=max(1, min(p["top_k"], MAX_TOP_K)), top_p=p["top_p"] or 1.0,
                                 temperature=max(0.0, p["temperature"]), seed=max(0, p["seed"]))
        except (ValueError, TypeError) as e:
            raise ModelError(f"{self.bundle.source}: LlmMetadata section: sampler_params: {e}") from e

    def _find_signatures(self) -> None:
        it = self.interpreter
        sigs = it.get_signature_list()
        source = self.bundle.source
        if "decode" not in sigs:
            raise ModelError(f"{source}: TFLiteModel section: no `decode` signature (signatures: {sorted(sigs)}); "
                             "a litert-torch decoder has `prefill_N` and `decode`")
        self.decode = it.get_signature_runner("decode")
        inputs, outputs = self.decode.get_input_details(), self.decode.get_output_details()
        for name in ("tokens", "input_pos"):
            if name not in inputs:
                raise ModelError(f"{source}: TFLiteModel section: `decode` has no `{name}` input")
        if "logits" not in outputs:
            raise ModelError(f"{source}: TFLiteModel section: `decode` has no `logits` output")
        self.cache_names = sorted(set(inputs) & set(outputs))
        if not self.cache_names:
            raise ModelError(f"{source}: TFLiteModel section: `decode` has no KV-cache inputs that are also outputs")
        self.vocab = int(outputs["logits"]["shape"][-1])
        ks = [n for n in self.cache_names if "_k_" in n]
        vs = [n for n in self.cache_names if "_v_" in n]
        k_shape = tuple(inputs[ks[0] if ks else self.cache_names[0]]["shape"])
        v_shape = tuple(inputs[vs[0] if vs else self.cache_names[0]]["shape"])
        self.prefills: dict[int, Any] = {}
        for key in sigs:
            if PREFILL.match(key):
                runner = it.get_signature_runner(key)
                details = runner.get_input_details()
                if "tokens" in details and "input_pos" in details:
                    self.prefills[int(details["tokens"]["shape"][-1])] = runner
        self.cache_length = _cache_length(k_shape, v_shape, max(self.prefills, default=1))
        self.cache_positions = self.cache_length  # the position axis's size (before max_num_tokens)
        self.cache_shapes = {name: tuple(inputs[name]["shape"]) for name in self.cache_names}
        if self.bundle.max_num_tokens:
            self.cache_length = min(self.cache_length, self.bundle.max_num_tokens)
        tok = self.tokenizer.vocab_size
        if tok != self.vocab:
            fewer = "fewer" if tok < self.vocab else "more"
            raise ModelError(f"{source}: tokenizer: {tok} tokens, {fewer} than the model's vocabulary of {self.vocab} "
                             "(its logits); give the model's own tokenizer (--tokenizer), or make one of that size: "
                             f"python -m gpuengine.llm.make_tokenizer --vocab {self.vocab} OUT.model")
        bad = [t for ids in [self.bundle.start_ids, *self.bundle.stop_ids] for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise ModelError(f"{source}: LlmMetadata section: start/stop token {bad[0]} is outside the model's "
                             f"vocabulary of {self.vocab}")

    def _compile(self, progress: bool) -> None:
        runners = [("decode", self.decode), *((f"prefill_{n}", r) for n, r in sorted(self.prefills.items()))]
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(runners), desc="compiling", unit="signature", leave=False)
        start = time.perf_counter()
        for name, runner in runners:
            if bar is not None:
                bar.set_postfix_str(name)
            runner.compiled  # noqa: B018 - compiles the signature
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        self.compile_s = time.perf_counter() - start

    def _bind_state(self) -> None:
        """Each session's cache is bound to decode and prefill (see the module docstring): the cache inputs are
        handed to the GPU (input_buffer: never uploaded) where every signature is one GPU program computing its
        cache outputs; token and position inputs of decode are GPU buffers the host or the sampler writes, where
        the model allows. Elsewhere the cache goes through the host."""
        decode = self.decode
        runners = {0: decode, **self.prefills}
        self.kv_on_gpu = all(r.compiled.sole_gpu_program is not None for r in runners.values())
        host_reason = "a signature is not one GPU program (it has CPU partitions)"
        # tensor indices of each signature's inputs and outputs by name (the programs' keys)
        self.inputs_of = {n: {k: int(d["index"]) for k, d in r.get_input_details().items()} for n, r in runners.items()}
        self.outputs_of = {n: {k: int(d["index"]) for k, d in r.get_output_details().items()}
                           for n, r in runners.items()}
        # per signature: (its cache output buffer, cache name) of the caches not written in place: copied back
        # into the session's buffer after each call
        self.copied_back: dict[int, list[tuple[Any, str]]] = {}
        try:
            for n, runner in runners.items() if self.kv_on_gpu else ():
                program = runner.compiled.sole_gpu_program
                back = []
                for name in self.cache_names:
                    runner.input_buffer(name)  # read from the session's buffer (bind_buffers), never uploaded
                    out = runner.output_buffer(name).buffer
                    if program.in_place.get(self.inputs_of[n][name]) != self.outputs_of[n][name]:
                        back.append((out, name))
                self.copied_back[n] = back
        except ValueError:
            self.kv_on_gpu = False
            host_reason = "the KV cache is read by a CPU partition"
        if not self.kv_on_gpu:  # the cache is read on the CPU, or a signature has CPU partitions: via the host
            for runner in runners.values():
                for name in self.cache_names:
                    try:
                        runner.set_input_buffer(name, None)
                    except ValueError:
                        pass
            self._host_cache = {n: np.zeros(d["shape"], d["dtype"])
                                for n, d in decode.get_input_details().items() if n in self.cache_names}
        self.gpu_loop_reason: str | None = None
        self.token_buffer = self.position_buffer = None
        self.logits_index = self.outputs_of[0]["logits"]
        if not self.kv_on_gpu:
            self.gpu_loop_reason = host_reason
        else:
            try:
                self.token_buffer = decode.input_buffer("tokens").buffer
                self.position_buffer = decode.input_buffer("input_pos").buffer
            except ValueError as e:
                self.gpu_loop_reason = f"`tokens` / `input_pos` of decode are not GPU inputs ({e})"
            self.decode_program.set_readback(frozenset({self.logits_index}))

    @property
    def decode_program(self) -> Any:
        """Decode's GPU program (where sessions' caches are on the GPU)."""
        return self.decode.compiled.sole_gpu_program

    def bind_session(self, session: Session) -> dict[int, Any]:
        """`session`'s bind groups (BoundBuffers) for decode (key 0) and each prefill_N (key N): its cache, and in
        decode its own token and position where it has them; made once, at its creation."""
        bound = {}
        for n, runner in {0: self.decode, **self.prefills}.items():
            inputs = self.inputs_of[n]
            buffers = {inputs[name]: session.kv[name] for name in self.cache_names}
            if n == 0 and session.token_buffer is not None and session.token_buffer is not self.token_buffer:
                buffers[inputs["tokens"]] = session.token_buffer
                buffers[inputs["input_pos"]] = session.position_buffer
            bound[n] = runner.compiled.sole_gpu_program.bind_buffers(buffers)
        return bound

    def copies_back(self, session: Session, n: int) -> tuple[Any, ...]:
        """A command buffer copying signature n's cache outputs not written in place into `session`'s cache (to
        submit after its call), or nothing."""
        back = self.copied_back.get(n)
        if not back:
            return ()
        encoder = self.device.create_command_encoder()
        for buffer, name in back:
            encoder.copy_buffer_to_buffer(buffer, 0, session.kv[name], 0, int(buffer.size))
        return (encoder.finish(),)

    @property
    def device(self) -> Any:
        return self.decode.compiled.device

    @property
    def gpu(self) -> Any:
        """The runtime's GpuDevice of the decode signature (writes, copies and the sampler's buffers go there)."""
        return self.decode.compiled.gpu

    # -- feeding the model ------------------------------------------------------------------------------------
    def _write_step(self, session: Session, token: int, position: int) -> None:
        self.gpu.write(session.token_buffer, 0, np.array([token], np.float32))
        self.gpu.write(session.position_buffer, 0, np.array([position], np.float32))

    def _feed(self, session: Session, token: int, position: int, read: bool) -> np.ndarray | None:
        """One decode step of `session` with this token at this position; its logits when read."""
        self.activate(session)
        if not self.kv_on_gpu:
            feeds = {"tokens": np.array([[token]], np.int32), "input_pos": np.array([position], np.int32)}
            out = self.decode.run({**feeds, **self._host_cache})
            self._host_cache = {n: out[n] for n in self.cache_names}
            return out["logits"].reshape(-1)
        feeds = {}
        if self.token_buffer is not None:
            self._write_step(session, token, position)
        else:
            inputs = self.inputs_of[0]
            feeds = {inputs["tokens"]: np.array([[token]], np.int32), inputs["input_pos"]: np.array([position],
                                                                                                    np.int32)}
        bound = session.bindings[0]
        job = bound.program.submit(feeds, read=read, bindings=bound, after=self.copies_back(session, 0),
                                   watch=False)
        return bound.program.collect(job)[self.logits_index].reshape(-1) if read else None

    def prefill(self, session: Session, ids: list[int], start: int) -> None:
        """Write `session`'s KV cache of `ids` at positions start..: prefill chunks that fit, the rest through
        decode (queued, not waited for)."""
        self.activate(session)
        self.wrote(session, start, start + len(ids))
        k = 0
        for n, take in chunk_plan(len(ids), start, list(self.prefills), self.cache_length):
            if n == 0:  # no prefill signature fits here: one token through decode
                self._feed(session, ids[k], start + k, read=False)
                k += 1
                continue
            tokens = np.zeros((1, n), np.int32)
            tokens[0, :take] = ids[k:k + take]
            positions = np.arange(start + k, start + k + n, dtype=np.int32)
            if self.kv_on_gpu:
                bound, inputs = session.bindings[n], self.inputs_of[n]
                bound.program.submit({inputs["tokens"]: tokens, inputs["input_pos"]: positions}, read=False,
                                     bindings=bound, after=self.copies_back(session, n), watch=False)
            else:
                out = self.prefills[n].run({"tokens": tokens, "input_pos": positions, **self._host_cache})
                self._host_cache = {name: out[name] for name in self.cache_names}
            k += take

    # -- sessions' state on the GPU ---------------------------------------------------------------------------
    @property
    def owner(self) -> Session | None:
        """The session that submitted last (None before any, or once it is closed)."""
        return self._owner() if self._owner is not None else None

    def cache_buffers(self) -> dict[str, Any]:
        """Decode's own KV-cache buffers by input name (a session's cache has their sizes and is bound in their
        place)."""
        return {name: self.decode.output_buffer(name).buffer for name in self.cache_names}

    def session_memory_bytes(self, loop: str | None = None) -> int:
        """GPU bytes a new session allocates (its KV cache, and in the GPU loop its token and position, its
        sampler's state and staging ring): what a server counts against its memory limit before opening one."""
        if not self.kv_on_gpu:
            return 0
        total = sum(int(b.size) for b in self.cache_buffers().values())
        if (loop or self.loop) == "gpu" and self.token_buffer is not None:
            total += ((sampler_kernel.HISTORY + self.cache_length + 1) * 4 + -(-self.vocab // 32) * 4
                      + STAGING_BYTES * (self.steps_ahead + 1) + int(self.token_buffer.size)
                      + int(self.position_buffer.size))
        return total

    def sessions_memory_bytes(self) -> int:
        """GPU bytes the live sessions hold together (Session.memory_bytes summed)."""
        return sum(s.memory_bytes() for s in list(self.sessions))

    def activate(self, session: Session) -> bool:
        """Note that `session` submits next; True when another session submitted last (a switch). On the GPU
        nothing is queued for it: each session's submissions bind its own buffers. Where the cache goes through
        the host, the session's arrays become the ones fed."""
        if self.owner is session:
            return False
        if session.closed:
            raise RuntimeError("this session is closed; create another one")
        owner = self.owner
        self._owner = weakref.ref(session)
        self.switches += 1
        if not self.kv_on_gpu:
            if owner is not None:
                owner.host_cache = self._host_cache
            self._host_cache = session.host_cache or {n: np.zeros_like(v) for n, v in self._host_cache.items()}
        return True

    def _copy_positions(self, encoder: Any, source: dict[str, Any], target: dict[str, Any], start: int, end: int
                        ) -> int:
        """Record the copies of cache positions [start, end) of every cache tensor; the bytes copied."""
        total = 0
        for name, buffer in source.items():
            ranges = position_ranges(self.cache_shapes[name], self.cache_positions, start, end)
            for offset, size in [(0, int(buffer.size))] if ranges is None else ranges:
                encoder.copy_buffer_to_buffer(buffer, offset, target[name], offset, size)
                total += size
        self.swap_bytes += total
        return total

    def wrote(self, session: Session, start: int, end: int) -> None:
        """Note that `session` writes cache positions [start, end) (what a clone copies)."""
        session.written = max(session.written, min(end, self.cache_positions))

    def clone_state(self, source: Session, target: Session) -> None:
        """Copy `source`'s KV cache into `target`'s buffers on the GPU, the positions it has written (queued
        after its work: the queue keeps order)."""
        if not self.kv_on_gpu:
            cache = self._host_cache if self.owner is source else source.host_cache
            target.host_cache = {n: v.copy() for n, v in cache.items()} if cache else None
            return
        if not source.written:
            return  # nothing written yet
        encoder = self.device.create_command_encoder()
        self._copy_positions(encoder, source.kv, target.kv, 0, source.written)
        self.device.queue.submit([encoder.finish()])
        target.written = source.written

    def release(self, session: Session) -> None:
        """Forget `session` (closed): it stops being the owner; its buffers go once the GPU is done with them."""
        if self.owner is session:
            self._owner = None
        self.sessions.discard(session)

    # -- the two decode loops -----------------------------------------------------------------------------------
    def host_loop(self, session: Session, token: int, position: int, count: int, config: SamplerConfig,
                  step0: int, stop: set[int], logprobs: int | None = None, constraint: Any = None
                  ) -> Iterator[int]:
        """Each step's logits read back and sampled in numpy; `constraint` (structured.Constraint) masks the
        tokens its grammar forbids before sampling and takes each token; `logprobs`: session.logprobs gets each
        token's log-probability and that many alternatives."""
        stats = self.stats = LoopStats(loop="host")
        for k in range(count):
            if session.closed:
                return
            self.wrote(session, position + k, position + k + 1)
            logits = self._feed(session, token, position + k, read=True)
            stats.steps += 1
            stats.reads += 1
            stats.bytes_read += logits.nbytes
            stats.uploads += 1 if k else 0
            stats.max_in_flight = 1
            scores = logits if constraint is None else np.where(constraint.allowed(), logits, -np.inf)
            token = sample(scores, config, step0 + k)
            if logprobs is not None:
                session.logprobs.append(token_logprob(logits, token, logprobs))
            if constraint is not None:
                constraint.consume(token)
            yield token
            if token in stop or (constraint is not None and constraint.stopped):
                return

    def step_logits(self, session: Session, token: int, position: int) -> np.ndarray:
        """Feed `session` one token at `position` and read the logits that follow it (scoring)."""
        self.wrote(session, position, position + 1)
        return self._feed(session, token, position, read=True)

    def gpu_loop(self, session: Session, token: int, position: int, count: int, config: SamplerConfig,
                 step0: int, stop: set[int], constraint: Any = None) -> Iterator[int]:
        """Steps of `session` on the GPU, `steps_ahead` in flight, each one submission with its own bind groups
        (decode, then its sampler writing its next token and position); other sessions' generators may run
        between two of its tokens. Steps past a stop token or an abandoned stream finish on the GPU unread: the
        session's staging buffers are mapped only by it.
        constraint: its bitmask of allowed tokens is uploaded before each step and the sampler draws within it;
        one step in flight (the next mask needs this token)."""
        sampler, staging_ring = session.gpu_sampler()
        stats = self.stats = LoopStats(loop="gpu")
        self.activate(session)
        self._write_step(session, token, position)
        bound = session.bindings[0]
        program = bound.program
        temperature = 0.0 if config.greedy else config.temperature
        sampler.reset(config.seed, config.top_k, config.top_p, temperature, step0, masked=constraint is not None)
        pending: deque[tuple[int, Any]] = deque()
        submitted = 0
        ring = len(staging_ring)
        ahead = 1 if constraint is not None else self.steps_ahead
        while not session.closed:  # close() ends an open stream
            while submitted < count and len(pending) < ahead:
                staging = staging_ring[submitted % ring]
                self.activate(session)
                self.wrote(session, position + submitted, position + submitted + 1)
                if constraint is not None:
                    words = constraint.bitmask()
                    sampler.set_mask(words)
                    stats.uploads += 1
                    stats.bytes_uploaded += words.nbytes
                program.submit({}, read=False, bindings=bound, watch=False,
                               after=(*self.copies_back(session, 0), sampler.command(step0 + submitted, staging)))
                pending.append((submitted, staging))
                submitted += 1
                stats.steps += 1
                stats.max_in_flight = max(stats.max_in_flight, len(pending))
            if not pending:
                return
            _, staging = pending.popleft()
            token = int(read_words(staging, gpu=self.gpu)[0])
            stats.reads += 1
            stats.bytes_read += 4
            if constraint is not None:
                constraint.consume(token)
            yield token
            if token in stop or (constraint is not None and constraint.stopped):
                return

    def create_session(self, *, apply_prompt_template: bool = True, sampler_config: SamplerConfig | None = None,
                       loop: str | None = None) -> Session:
        """A new session with a KV cache of its own (session_memory_bytes on the GPU, until Session.close)."""
        session = Session(self, sampler_config or self.default_sampler, apply_prompt_template, loop or self.loop)
        self.sessions.add(session)
        return session

    def guidance_tokenizer(self) -> Any:
        """llguidance's view of the tokenizer, the bundle's stop tokens as its end (built once: about a second)."""
        if self._guidance is None:
            from .structured import guidance_tokenizer

            self._guidance = guidance_tokenizer(self.tokenizer, sorted(self.bundle.stop_tokens))
        return self._guidance

    def constraint(self, response_format: dict[str, Any] | None) -> Any:
        """A structured.Constraint for OpenAI's response_format (None for none or {"type": "text"})."""
        from .structured import Constraint

        return Constraint.from_response_format(self, response_format)

    def create_conversation(self, system_message: str | None = None, *, system: str | None = None,
                            messages: list[Any] | None = None, tools: list[Any] | None = None,
                            chat_template: str | None = None, sampler_config: SamplerConfig | None = None,
                            max_tokens: int = 256, loop: str | None = None) -> Conversation:
        """A Conversation on a session of its own, rendering messages with the bundle's chat template (or
        `chat_template`; see chat.py for the prefix/suffix and plain fallbacks); `system` is `system_message`."""
        from .chat import ChatTemplate
        from .conversation import Conversation

        if system is not None and system_message is not None:
            raise ValueError("give the system prompt once: system_message or system")
        template = ChatTemplate.for_bundle(self.bundle, chat_template)
        return Conversation(self, template, system_message=system_message if system is None else system,
                            messages=messages, tools=tools, sampler_config=sampler_config, max_tokens=max_tokens,
                            loop=loop)

    def gpu_memory_bytes(self) -> int:
        """GPU memory the signatures' programs hold: planned tensors, boundary buffers, weights (shared ones once)."""
        seen: set[int] = set()
        total = 0
        runners = [self.decode, *self.prefills.values()]
        for runner in runners:
            for prog in runner.compiled.gpu_programs:
                for buf in prog.buffers():
                    if id(buf) not in seen:
                        seen.add(id(buf))
                        total += int(buf.size)
        return total


class DecodeSampler:
    """The GPU decode loop's next-token sampler: lowering/kernels/sampler.py's WGSL added by the runtime after each
    decode step (CompiledGraph.add_dispatch, submitted with SignatureRunner.submit(after=...)); it reads the step's
    logits, writes the next step's token and position where decode reads them and keeps the tokens in its state
    buffer."""

    def __init__(self, compiled: Any, vocab: int, logits: Any, tokens: Any, position: Any, steps: int) -> None:
        self.gpu = compiled.gpu
        self.state = state_buffer(self.gpu, (sampler_kernel.HISTORY + steps) * 4)
        self.allowed = state_buffer(self.gpu, -(-vocab // 32) * 4)  # a constraint's bitmask of the next token
        self.dispatch = compiled.add_dispatch(sampler_kernel.source(vocab),
                                              [logits, tokens, position, self.state, self.allowed])

    def reset(self, seed: int, top_k: int, top_p: float, temperature: float, step: int, masked: bool = False
              ) -> None:
        """Step `step` with these settings (written through the queue, ordered before the next submission);
        masked: draw only tokens set in `allowed` (set_mask before each step)."""
        self.gpu.write(self.state, 0, sampler_kernel.header(seed, top_k, top_p, temperature, masked=masked))
        self.gpu.write(self.state, 0, np.array([step], np.uint32))

    def set_mask(self, words: np.ndarray) -> None:
        """The next step's allowed tokens: bit j % 32 of word j // 32 (llguidance's bitmask), queued in order."""
        self.gpu.write(self.allowed, 0, words)

    def command(self, step: int, staging: Any) -> Any:
        """The sampler's dispatch, then the copy of step `step`'s token to `staging`: a command buffer to submit
        after a decode step."""
        offset = (sampler_kernel.HISTORY + step) * 4
        return self.dispatch.command([(self.state, offset, staging, 0, 4)])


class Session:
    """One conversation with a KV cache of its own on the GPU: the cache carries over from turn to turn (position,
    the last sampled token), other sessions of the engine may generate between two of its tokens, clone() copies
    it on the GPU, close() frees it. One reply at a time per session."""

    def __init__(self, engine: Engine, sampler: SamplerConfig, apply_prompt_template: bool, loop: str) -> None:
        if loop not in ("gpu", "host"):
            raise ValueError(f"loop must be 'gpu' or 'host', got {loop!r}")
        if loop == "gpu" and engine.gpu_loop_reason is not None:
            raise ValueError(f"the GPU decode loop is not available for this model: {engine.gpu_loop_reason}")
        self.engine, self.sampler, self.apply_prompt_template, self.loop = engine, sampler, apply_prompt_template, loop
        self.position = 0  # positions of the KV cache written so far
        self.pending: list[int] = []  # the last sampled token, fed before the next prompt
        self.steps = 0  # sampler draws so far (the generator's counter)
        self.history: list[int] = []  # every token fed or generated
        # why the last reply ended: "stop" (a stop token or sequence), "length" (max_tokens), "cache_full" (the KV
        # cache's last position came before max_tokens), None while a reply is being generated or before any
        self.finish_reason: str | None = None
        self.logprobs: list[TokenLogprob] = []  # the last reply's, when asked for (generate_tokens(logprobs=k))
        self.closed = False
        self.generating = False  # a reply's generator has started and not finished or been closed
        self.written = 0  # cache positions [0, written) hold this session's entries (what a clone copies)
        self.host_cache: dict[str, np.ndarray] | None = None  # its cache where it goes through the host
        self.kv: dict[str, Any] = {}  # its cache on the GPU, by decode's input name
        # the token and position its decode steps read: its own in the GPU loop (its sampler writes them), else
        # the engine's (written by the host before each step)
        self.token_buffer, self.position_buffer = engine.token_buffer, engine.position_buffer
        self.bindings: dict[int, Any] = {}  # its bind groups: decode (0) and prefill_N (N), Engine.bind_session
        if engine.kv_on_gpu:
            self.kv = {name: state_buffer(engine.gpu, int(b.size)) for name, b in engine.cache_buffers().items()}
            if loop == "gpu":
                self.token_buffer = state_buffer(engine.gpu, int(engine.token_buffer.size))
                self.position_buffer = state_buffer(engine.gpu, int(engine.position_buffer.size))
            self.bindings = engine.bind_session(self)
        self._sampler: DecodeSampler | None = None
        self._staging: list[Any] = []
        if loop == "gpu":
            self.gpu_sampler()

    def gpu_sampler(self) -> tuple[DecodeSampler, list[Any]]:
        """This session's GPU sampler (its state buffer and bind group, made once) and staging ring."""
        if self._sampler is None:
            engine = self.engine
            logits = engine.decode.output_buffer("logits").buffer
            self._sampler = DecodeSampler(engine.decode.compiled, engine.vocab, logits, self.token_buffer,
                                          self.position_buffer, engine.cache_length + 1)
            self._staging = [readback_buffer(engine.gpu, STAGING_BYTES) for _ in range(engine.steps_ahead + 1)]
        return self._sampler, self._staging

    def buffers(self) -> list[Any]:
        """The GPU buffers this session owns."""
        own = [*self.kv.values(), *self._staging]
        if self.token_buffer is not None and self.token_buffer is not self.engine.token_buffer:
            own += [self.token_buffer, self.position_buffer]
        return own + ([self._sampler.state, self._sampler.allowed] if self._sampler is not None else [])

    def memory_bytes(self) -> int:
        """GPU bytes this session holds (0 once closed)."""
        return sum(int(b.size) for b in self.buffers())

    def clone(self) -> Session:
        """A new session with this one's KV cache, history and sampler counter, copied on the GPU (a shared
        prefix prefilled once, continued independently). Between replies only."""
        self._check_usable()
        if self.generating:
            raise RuntimeError("this session is generating a reply: clone it before or after, not during")
        twin = self.engine.create_session(apply_prompt_template=self.apply_prompt_template,
                                          sampler_config=self.sampler, loop=self.loop)
        twin.position, twin.pending, twin.steps = self.position, list(self.pending), self.steps
        twin.history, twin.finish_reason = list(self.history), self.finish_reason
        self.engine.clone_state(self, twin)
        return twin

    def close(self) -> None:
        """Free this session's GPU memory; an open stream of it ends. Idempotent; the session is unusable after."""
        if self.closed:
            return
        self.closed = True
        engine = self.engine
        engine.release(self)
        buffers = self.buffers()
        self.kv, self._staging, self._sampler, self.host_cache, self.bindings = {}, [], None, None, {}
        self.token_buffer = self.position_buffer = None
        if buffers:
            WorkDone(engine.gpu).wait(10.0)  # work queued on them (steps in flight, copies) finishes first
            for buffer in buffers:
                buffer.destroy()

    def rewind(self, length: int) -> None:
        """Keep the first `length` tokens of the history (fed or generated) and forget the rest: the next prompt is
        fed from there (the cache's later entries are written over). Between replies only."""
        self._check_usable()
        if self.generating:
            raise RuntimeError("this session is generating a reply: rewind it before or after, not during")
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= len(self.history):
            raise ValueError(f"rewind to a length in [0, {len(self.history)}], got {length!r}")
        if length == len(self.history):
            return
        self.history = self.history[:length]
        self.position = min(self.position, length)
        self.pending = []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_usable(self) -> None:
        if self.closed:
            raise RuntimeError("this session is closed; create another one")

    def prompt_ids(self, prompt: str) -> list[int]:
        """The tokens a prompt adds: the start token first in a session (also without the template, as LiteRT-LM's
        session with apply_prompt_template=False), the user/model turn affixes with the template."""
        if not isinstance(prompt, str):
            raise ValueError(f"the prompt must be a string, got {type(prompt).__name__}")
        if not prompt:
            raise ValueError("the prompt is empty: give at least one character")
        ids = prompt_tokens(self.engine.bundle, prompt, self.apply_prompt_template,
                            first=self.position == 0 and not self.pending)
        if not ids:
            raise ValueError(f"the prompt {prompt!r} encodes to no tokens")
        return ids

    def generate_tokens(self, ids: list[int], max_tokens: int = 64, sampler: SamplerConfig | None = None, *,
                        logprobs: int | None = None, constraint: Any = None) -> Iterator[int]:
        """Feed these token ids (after the last turn's pending token) and yield the generated ids as they arrive
        (checked here, before anything is fed: ValueError for an id outside the vocabulary or a prompt over the
        cache). A reply that reaches the cache's last position ends there: finish_reason says "cache_full".

        logprobs: None, or how many alternatives (0..MAX_TOP_LOGPROBS) session.logprobs records per token with
        its log-probability (the reply then runs in the host loop: the logits come back each step; the same
        tokens); constraint: a structured.Constraint (JSON schema, regex, Lark grammar) the reply follows token
        by token, ending when its grammar is complete (in the GPU loop the sampler reads its bitmask)."""
        engine = self.engine
        self._check_usable()
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise ValueError(f"logprobs must be None or an integer in [0, {MAX_TOP_LOGPROBS}], got {logprobs!r}")
        new = [int(t) if isinstance(t, (int, np.integer)) else t for t in ids]
        ids = [*self.pending, *new]
        bad = [t for t in ids if not isinstance(t, (int, np.integer)) or not 0 <= int(t) < engine.vocab]
        if bad:
            raise ValueError(f"token id {bad[0]!r} is outside the vocabulary [0, {engine.vocab - 1}]")
        if not ids:
            raise ValueError("nothing to feed: the prompt has no tokens")
        room = engine.cache_length - self.position
        if len(ids) > room:
            raise ValueError(f"the prompt ({len(ids)} tokens after {self.position} in the session) does not fit the "
                             f"KV cache of {engine.cache_length} positions with room for a generated token; start a "
                             "new session or shorten it")
        return self._generate(ids, new, max_tokens, sampler or self.sampler, logprobs, constraint)

    def _generate(self, ids: list[int], new: list[int], max_tokens: int, config: SamplerConfig,
                  logprobs: int | None = None, constraint: Any = None) -> Iterator[int]:
        self._check_usable()
        if self.generating:
            raise RuntimeError("this session is already generating a reply: read its stream to the end or close() "
                               "it first (one reply at a time per session; other sessions may generate meanwhile)")
        self.generating = True
        try:
            yield from self._reply(ids, new, max_tokens, config, logprobs, constraint)
        finally:
            self.generating = False

    def _reply(self, ids: list[int], new: list[int], max_tokens: int, config: SamplerConfig,
               logprobs: int | None, constraint: Any) -> Iterator[int]:
        engine = self.engine
        stop = engine.bundle.stop_tokens
        sequences = [list(seq) for seq in engine.bundle.stop_ids if len(seq) > 1]
        start = time.perf_counter()
        engine.prefill(self, [int(t) for t in ids[:-1]], self.position)
        first_position = self.position + len(ids) - 1
        count = min(max_tokens, engine.cache_length - first_position)
        self.logprobs = []
        host = self.loop == "host" or logprobs is not None
        steps = (engine.host_loop(self, int(ids[-1]), first_position, count, config, self.steps, stop, logprobs,
                                  constraint) if host else
                 engine.gpu_loop(self, int(ids[-1]), first_position, count, config, self.steps, stop, constraint))
        self.history.extend(new)
        self.position += len(ids) - 1
        self.pending = [int(ids[-1])]
        generated = 0
        timing = engine.timing = Timing(prefill_tokens=len(ids))
        first_at = None
        self.finish_reason = None
        for token in steps:
            now = time.perf_counter()
            if first_at is None:
                first_at = now
                timing.prefill_s = now - start
            generated += 1
            timing.decode_tokens = generated - 1
            timing.decode_s = now - first_at
            # the token fed before this one is in the cache now; this one is fed next
            self.position += 1
            self.pending = [token]
            self.history.append(token)
            self.steps += 1
            ends = token in stop or any(len(seq) <= generated and self.history[-len(seq):] == seq
                                        for seq in sequences) or (constraint is not None and constraint.stopped)
            if ends:
                self.finish_reason = "stop"
            elif generated == count:
                self.finish_reason = "length" if count == max_tokens else "cache_full"
            yield token
            if ends:
                return  # a stop token, or a stop sequence of several tokens, ends the reply

    def generate_stream(self, prompt: str, max_tokens: int = 64, sampler: SamplerConfig | None = None, *,
                        logprobs: int | None = None, constraint: Any = None) -> Iterator[str]:
        """Text pieces as tokens arrive (stop tokens end the reply and are not shown); logprobs and constraint
        as in generate_tokens."""
        ids = self.prompt_ids(prompt)
        stop = self.engine.bundle.stop_tokens
        text = StreamDecoder(self.engine.tokenizer)
        for token in self.generate_tokens(ids, max_tokens, sampler, logprobs=logprobs, constraint=constraint):
            if token in stop:
                break
            piece = text.push(token)
            if piece:
                yield piece
        rest = text.flush()
        if rest:
            yield rest

    def generate(self, prompt: str, max_tokens: int = 64, sampler: SamplerConfig | None = None, *,
                 logprobs: int | None = None, constraint: Any = None) -> str:
        return "".join(self.generate_stream(prompt, max_tokens, sampler, logprobs=logprobs, constraint=constraint))

    # -- scoring ----------------------------------------------------------------------------------------------
    def score(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        """The log-probability of each continuation's tokens after `prompt` (LiteRT-LM's text scoring: the sum over
        the continuation's tokens, each encoded alone), this session's history before them; the session itself
        is left as it was (the prompt is prefilled once, on a GPU clone)."""
        if isinstance(continuations, str):
            raise ValueError("continuations is a list of strings (one score each), got a string")
        ids = self.prompt_ids(prompt)
        pieces = [self.engine.tokenizer.encode(c) if isinstance(c, str) else c for c in continuations]
        return [float(lp.sum()) for lp in self.score_tokens(ids, pieces)]

    def score_tokens(self, ids: list[int], continuations: Sequence[list[int]]) -> list[np.ndarray]:
        """Per-token log-probabilities of each continuation (token ids) after the prompt `ids`, on clones of this
        session (which stays as it was)."""
        self._check_usable()
        engine = self.engine
        if not continuations:
            raise ValueError("give at least one continuation to score")
        for c in continuations:
            if not isinstance(c, (list, tuple)) or not c:
                raise ValueError(f"a continuation must be a non-empty string or list of token ids, got {c!r}")
            if any(not isinstance(t, (int, np.integer)) or not 0 <= int(t) < engine.vocab for t in c):
                raise ValueError(f"a continuation's token id is outside the vocabulary [0, {engine.vocab - 1}]")
        feed = [*self.pending, *ids]
        longest = max(len(c) for c in continuations)
        if self.position + len(feed) + longest - 1 > engine.cache_length:
            raise ValueError(f"the prompt ({len(feed)} tokens after {self.position}) and a continuation of "
                             f"{longest} do not fit the KV cache of {engine.cache_length} positions")
        base = self.clone()
        try:
            engine.prefill(base, [int(t) for t in feed[:-1]], base.position)
            base.position += len(feed) - 1
            scores = []
            for c in continuations:
                work = base.clone() if len(continuations) > 1 else base
                try:
                    tokens = [int(feed[-1]), *(int(t) for t in c[:-1])]
                    rows = [engine.step_logits(work, t, base.position + k) for k, t in enumerate(tokens)]
                    scores.append(np.array([log_softmax(row)[int(t)] for row, t in zip(rows, c, strict=True)]))
                finally:
                    if work is not base:
                        work.close()
            return scores
        finally:
            base.close()
