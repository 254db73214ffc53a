"""Where the first call of a language model's signatures goes: time from Interpreter() to the first result of
prefill_N and of decode, split into phases.

    python scripts/dev/first_call.py MODEL [--json] [--signatures prefill_32,decode]

Each phase is timed exclusively (a phase nested in another is not counted twice) by wrapping the engine's own
functions for the duration of the run: reading and validating the file, the passes and partitioning, lowering to
dispatches with the kernel choice, the memory plan, WGSL generation, shader module + pipeline creation (and how
many distinct pipelines the device holds), weight upload, bind groups, recording, and the first submit up to the
result. lavapipe (Mesa's software Vulkan) compiles a pipeline's machine code lazily, at its first dispatch, so the
first submit holds both that compile and the GPU work; a second call of the same signature (`again`) is the GPU
work alone. Run it with MESA_SHADER_CACHE_DIR=$(mktemp -d) for a cold Mesa shader cache. Wall and main-thread CPU
seconds are given (on a shared machine the CPU figure is the steadier one for the host phases).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PHASES = ("read + validate", "passes + partition", "lowering", "kernel choice", "memory plan", "wgsl generation",
          "pipeline creation", "weight upload", "bind groups", "record", "device", "first submit")


class PhaseTimer:
    """Exclusive wall and main-thread CPU seconds per phase, for functions wrapped with `wrap`."""

    def __init__(self) -> None:
        self.wall: collections.Counter[str] = collections.Counter()
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._stack: list[list[float]] = []
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            self._stack.append([0.0, 0.0])
            try:
                return original(*args, **kwargs)
            finally:
                dw, dc = time.perf_counter() - wall, time.thread_time() - cpu
                inner = self._stack.pop()
                self.wall[phase] += dw - inner[0]
                self.cpu[phase] += dc - inner[1]
                self.calls[phase] += 1
                if self._stack:
                    self._stack[-1][0] += dw
                    self._stack[-1][1] += dc

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


def instrument(timer: PhaseTimer) -> None:
    from gpuengine.api import interpreter
    from gpuengine.latency import policy
    from gpuengine.lowering import codegen
    from gpuengine.runtime import device, program
    from gpuengine.runtime import graph as engine

    timer.wrap(interpreter, "read_model", "read + validate")
    timer.wrap(interpreter.validate, "validate_model", "read + validate")
    timer.wrap(interpreter, "prepare", "passes + partition")
    timer.wrap(program, "partition_specs", "lowering")
    timer.wrap(policy, "choose", "kernel choice")
    timer.wrap(program, "plan_memory", "memory plan")
    timer.wrap(codegen, "render", "wgsl generation")
    timer.wrap(program.GpuProgram, "_pipeline", "pipeline creation")
    timer.wrap(program, "shared_constant", "weight upload")
    timer.wrap(program.GpuProgram, "_upload_data", "weight upload")
    timer.wrap(program.GpuProgram, "_bind", "bind groups")
    timer.wrap(program.GpuProgram, "_encode", "record")
    timer.wrap(engine, "device_for", "device")
    timer.wrap(device, "get_device", "device")
    timer.wrap(program.GpuProgram, "run", "first submit")


def feeds_for(runner: Any) -> dict[str, np.ndarray]:
    """Zero caches, token 1 everywhere, positions 0..T-1."""
    feeds = {name: np.zeros(d["shape"], d["dtype"]) for name, d in runner.get_input_details().items()}
    if "tokens" in feeds:
        feeds["tokens"][:] = 1
    if "input_pos" in feeds:
        feeds["input_pos"][:] = np.arange(feeds["input_pos"].size)
    return feeds


def measure(model: str, signatures: list[str] | None = None, **options: Any) -> dict[str, Any]:
    """Time Interpreter() and the first call of each signature (prefill first, then decode by default), then a
    second call of each (its GPU work alone), with the phase breakdown and the device's distinct pipelines."""
    import gpuengine

    timer = PhaseTimer()
    instrument(timer)
    marks: dict[str, float] = {}
    cpu: dict[str, float] = {}  # process CPU seconds, every thread (lavapipe's included): steadier on a shared machine
    try:
        start, start_cpu = time.perf_counter(), time.process_time()
        interpreter = gpuengine.Interpreter(model_path=model, **options)
        marks["Interpreter()"] = time.perf_counter() - start
        cpu["Interpreter()"] = time.process_time() - start_cpu
        keys = signatures or sorted(interpreter.get_signature_list(), key=lambda k: (k == "decode", k))
        first: dict[str, float] = {}
        for key in keys:
            runner = interpreter.get_signature_runner(key)
            t, c = time.perf_counter(), time.process_time()
            runner(**feeds_for(runner))
            first[key] = marks[key] = time.perf_counter() - t
            cpu[key] = time.process_time() - c
        marks["first calls, from Interpreter()"] = time.perf_counter() - start
        cpu["first calls, from Interpreter()"] = time.process_time() - start_cpu
        submit = dict(timer.wall)["first submit"] if "first submit" in timer.wall else 0.0
        again = {}
        timer.restore()
        for key in keys:
            runner = interpreter.get_signature_runner(key)
            feeds = feeds_for(runner)
            t, c = time.perf_counter(), time.process_time()
            runner(**feeds)
            again[key] = marks[f"{key} again"] = time.perf_counter() - t
            cpu[f"{key} again"] = time.process_time() - c
    finally:
        timer.restore()
    compiled = [interpreter.get_signature_runner(k).compiled for k in keys]
    gpu = next((c.gpu for c in compiled if c.gpu is not None), None)
    programs = {k: c.gpu_programs for k, c in zip(keys, compiled)}
    return {
        "model": Path(model).name,
        "seconds": {k: round(v, 2) for k, v in marks.items()},
        "cpu_seconds": {k: round(v, 2) for k, v in cpu.items()},
        "phases_wall_s": {p: round(timer.wall[p], 2) for p in PHASES if p in timer.wall},
        "phases_cpu_s": {p: round(timer.cpu[p], 2) for p in PHASES if p in timer.cpu},
        "first_submit_minus_gpu_work_s": round(submit - sum(again.values()), 2),
        "mesa_shader_cache": os.environ.get("MESA_SHADER_CACHE_DIR"),
        "calls": {p: timer.calls[p] for p in PHASES if p in timer.calls},
        "distinct_pipelines": len(gpu.pipelines) if gpu is not None else 0,
        "dispatches": {k: sum(len(p.dispatches) for p in progs) for k, progs in programs.items()},
        "partitions": {k: len(c.programs) for k, c in zip(keys, compiled)},
        "first_call_s": {k: round(v, 2) for k, v in first.items()},
    }


def table(result: dict[str, Any]) -> str:
    lines = [f"{result['model']}: distinct pipelines {result['distinct_pipelines']}, dispatches "
             + ", ".join(f"{k} {v}" for k, v in result["dispatches"].items())]
    lines.append(f"  {'':34s} {'wall s':>8s} {'cpu s':>8s}  (cpu: the process, every thread)")
    lines += [f"  {k:34s} {v:8.2f} {result['cpu_seconds'][k]:8.2f}" for k, v in result["seconds"].items()]
    lines.append(f"  {'phase':34s} {'wall s':>8s} {'cpu s':>8s} calls")
    for p, wall in result["phases_wall_s"].items():
        lines.append(f"  {p:34s} {wall:8.2f} {result['phases_cpu_s'][p]:8.2f} {result['calls'][p]:5d}")
    lines.append(f"  {'first submits minus GPU work':34s} {result['first_submit_minus_gpu_work_s']:8.2f}"
                 "   (lavapipe compiling pipelines at first dispatch)")
    return "\n".join(lines)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/dev/first_call.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--signatures", help="comma-separated, in call order (default: prefill_*, then decode)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.model, args.signatures.split(",") if args.signatures else None)
    out(json.dumps(result, indent=1) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
