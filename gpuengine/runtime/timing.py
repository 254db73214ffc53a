"""GPU time, two ways. All results in nanoseconds (WebGPU timestamps are nanoseconds; wgpu-native converts the
backend's ticks).

* `DispatchTimer.span`: what `bench` reports and `tune` optimizes. A sequence of dispatches in one compute pass
  with timestamps only at the pass's beginning and end, after a sustained warm-up (a GPU idling between
  invokes runs at low clocks: one early tune run read 6.5 ms for a model that runs in 1.7 ms warm). Wall clock
  per submit where the adapter has no timestamp queries.
* `DispatchTimer.measure`: GPU time per dispatch for `profile`, with a timestamp written between dispatches
  inside the pass where the adapter allows it (each such write adds several microseconds on an NVIDIA H100,
  so per-dispatch sums exceed `span`), one pass per dispatch otherwise, wall clock as the last resort.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .program import GpuProgram, record_dispatch

MAX_QUERIES = 4096  # WebGPU's limit on the size of one query set
WARMUP_S = 0.25  # seconds of back-to-back runs before a span is measured


def quiesce(gpu: Any) -> None:
    """Collect garbage and wait until the device has finished everything submitted, before timing it."""
    import gc

    gc.collect()
    gpu.submit_orphans()
    gpu.device._poll_wait()  # noqa: SLF001 - on_submitted_work_done_sync is broken in wgpu 0.32


@dataclass
class Timing:
    per_dispatch_ns: list[float]  # median over runs, one per dispatch of the program
    total_ns: float  # median GPU time of the whole sequence measured as one span
    method: str  # "inside-pass", "per-pass" or "wall-clock"


def _methods(program: GpuProgram) -> list[str]:
    features = program.gpu.features
    n = len(program.dispatches)
    methods = []
    if "timestamp-query-inside-passes" in features and n + 1 <= MAX_QUERIES:
        methods.append("inside-pass")
    if "timestamp-query" in features and 2 * n <= MAX_QUERIES:
        methods.append("per-pass")
    methods.append("wall-clock")
    return methods


class DispatchTimer:
    """Times the dispatches of a compiled program (its buffers and bind groups are reused as they are)."""

    def __init__(self, program: GpuProgram, method: str | None = None) -> None:
        import wgpu

        self.program = program
        available = _methods(program)
        if method is not None and method not in available:
            raise ValueError(f"timing method {method!r} not available here; available: {available}")
        self.method = method or available[0]
        dev = program.gpu.device
        n = len(program.dispatches)
        count = max(2, 2 * n + 2)
        if self.method != "wall-clock":
            self.query_set = dev.create_query_set(type=wgpu.QueryType.timestamp, count=count)
            self.resolve = dev.create_buffer(size=count * 8, usage=wgpu.BufferUsage.QUERY_RESOLVE
                                             | wgpu.BufferUsage.COPY_SRC)
            self.readback = dev.create_buffer(size=count * 8, usage=wgpu.BufferUsage.MAP_READ
                                              | wgpu.BufferUsage.COPY_DST)
        self.count = count

    def _read(self, encoder: Any, used: int) -> np.ndarray:
        dev = self.program.gpu.device
        encoder.resolve_query_set(self.query_set, 0, used, self.resolve, 0)
        encoder.copy_buffer_to_buffer(self.resolve, 0, self.readback, 0, used * 8)
        dev.queue.submit([encoder.finish()])
        self.readback.map_async("READ_NOSYNC").sync_wait()
        try:
            return np.frombuffer(self.readback.read_mapped(copy=True), np.uint64)[:used].astype(np.float64)
        finally:
            self.readback.unmap()

    def _once(self, dispatches: list[tuple[Any, Any, int, int, int]]) -> tuple[list[float], float]:
        from .webgpu import extras

        write_timestamp = extras(self.program.gpu.webgpu).write_timestamp
        dev = self.program.gpu.device
        n = len(dispatches)
        if self.method == "inside-pass":
            encoder = dev.create_command_encoder()
            compute = encoder.begin_compute_pass()
            write_timestamp(compute, self.query_set, 0)
            for k, (pipeline, bind_group, x, y, z) in enumerate(dispatches):
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, bind_group)
                record_dispatch(compute, x, y, z)
                write_timestamp(compute, self.query_set, k + 1)
            compute.end()
            stamps = self._read(encoder, n + 1)
            return list(np.diff(stamps)), float(stamps[-1] - stamps[0])
        if self.method == "per-pass":
            encoder = dev.create_command_encoder()
            for k, (pipeline, bind_group, x, y, z) in enumerate(dispatches):
                compute = encoder.begin_compute_pass(timestamp_writes={
                    "query_set": self.query_set, "beginning_of_pass_write_index": 2 * k,
                    "end_of_pass_write_index": 2 * k + 1})
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, bind_group)
                record_dispatch(compute, x, y, z)
                compute.end()
            stamps = self._read(encoder, 2 * n)
            per = list(stamps[1::2] - stamps[0::2])
            return per, float(stamps[-1] - stamps[0])
        per = []
        for pipeline, bind_group, x, y, z in dispatches:
            encoder = dev.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            record_dispatch(compute, x, y, z)
            compute.end()
            start = time.perf_counter_ns()
            dev.queue.submit([encoder.finish()])
            dev._poll_wait()  # noqa: SLF001 - on_submitted_work_done_sync is broken in wgpu 0.32
            per.append(float(time.perf_counter_ns() - start))
        return per, float(sum(per))

    def _span_once(self, dispatches: list[tuple[Any, Any, int, int, int]], repeat: int) -> float:
        """GPU nanoseconds of `dispatches` recorded `repeat` times in one pass."""
        dev = self.program.gpu.device
        encoder = dev.create_command_encoder()
        timed = "timestamp-query" in self.program.gpu.features
        writes = ({"query_set": self.query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
                  if timed and self.method != "wall-clock" else None)
        compute = encoder.begin_compute_pass(timestamp_writes=writes) if writes else encoder.begin_compute_pass()
        for _ in range(repeat):
            for pipeline, bind_group, x, y, z in dispatches:
                compute.set_pipeline(pipeline)
                compute.set_bind_group(0, bind_group)
                record_dispatch(compute, x, y, z)
        compute.end()
        if writes:
            stamps = self._read(encoder, 2)
            return float(stamps[1] - stamps[0])
        start = time.perf_counter_ns()
        dev.queue.submit([encoder.finish()])
        dev._poll_wait()  # noqa: SLF001 - on_submitted_work_done_sync is broken in wgpu 0.32
        return float(time.perf_counter_ns() - start)

    def warm_up(self, seconds: float = WARMUP_S) -> None:
        """Keep the GPU busy with the whole program for `seconds`, so it reaches its working clocks (after
        letting work that others left queued finish: programs collected by the garbage collector submit what
        they recorded in advance)."""
        quiesce(self.program.gpu)
        deadline = time.perf_counter() + seconds
        self._span_once(self.program.hot_dispatches, 1)
        while time.perf_counter() < deadline:
            self._span_once(self.program.hot_dispatches, 1)

    def span(self, runs: int = 20, dispatches: list[tuple[Any, Any, int, int, int]] | None = None,
             repeat: int = 1, warmup_s: float = WARMUP_S) -> float:
        """Median GPU nanoseconds of one pass of `dispatches` (default: the whole program), per repetition when
        they are recorded `repeat` times in the pass (a lone kernel repeated reads back to back, as in a model)."""
        dispatches = dispatches if dispatches is not None else self.program.hot_dispatches
        if warmup_s > 0:
            self.warm_up(warmup_s)
        return float(np.median([self._span_once(dispatches, repeat) for _ in range(max(1, runs))])) / repeat

    def measure(self, runs: int = 10, warmup: int = 2,
                dispatches: list[tuple[Any, Any, int, int, int]] | None = None) -> Timing:
        """Median per-dispatch and total GPU time over `runs` repetitions of the program's dispatches."""
        dispatches = dispatches if dispatches is not None else self.program.hot_dispatches
        quiesce(self.program.gpu)
        for _ in range(warmup):
            self._once(dispatches)
        per_runs, totals = [], []
        for _ in range(max(1, runs)):
            per, total = self._once(dispatches)
            per_runs.append(per)
            totals.append(total)
        return Timing(list(np.median(np.array(per_runs), axis=0)), float(np.median(totals)), self.method)
