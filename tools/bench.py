"""`gpuengine bench`: end-to-end latency and GPU time, against LiteRT's CPU runtime and its GPU accelerator."""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import add_engine_options, at_least, feeds, gpu_span_ms, interpreter, models, signature_feeds
from .litert_runner import time_invokes


def litert(model: bytes, inputs: dict[int, np.ndarray], accel: str, runs: int, warmup: int) -> tuple[dict, dict]:
    """Timings and outputs of LiteRT (`cpu` or its `gpu` accelerator), in a subprocess a crash cannot escape."""
    with tempfile.TemporaryDirectory() as tmp:
        model_path, in_path, out_path = (os.path.join(tmp, n) for n in ("m.tflite", "in.npz", "out.npz"))
        Path(model_path).write_bytes(model)
        np.savez(in_path, **{str(k): v for k, v in inputs.items()})
        try:
            proc = subprocess.run([sys.executable, "-m", "gpuengine.tools.litert_runner", in_path, out_path,
                                   model_path, accel, str(runs), str(warmup)], capture_output=True, text=True,
                                  timeout=1800)
        except subprocess.TimeoutExpired:
            return {"error": "timed out"}, {}
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            tail = " | ".join((proc.stderr or "").strip().splitlines()[-2:])
            return {"error": f"LiteRT {accel} process failed (exit {proc.returncode}): {tail}"}, {}
        timing = json.loads(lines[-1])
        if "error" in timing:
            if accel == "gpu":
                timing["error"] += " (LiteRT's GPU accelerator needs a hardware GPU adapter)"
            return timing, {}
        with np.load(out_path) as z:
            return timing, {int(k): z[k] for k in z.files}


def throughput(it: Any, inputs: dict[int, np.ndarray], inflight: int, runs: int, warmup: int) -> float:
    """Frames per second with `inflight` invokes in flight: each frame is submitted as soon as one of the
    `inflight` before it has been read back (Interpreter.invoke_async)."""
    jobs: collections.deque = collections.deque()
    start = 0.0
    for k in range(warmup + runs):
        if k == warmup:
            while jobs:
                jobs.popleft().result()
            start = time.perf_counter()
        jobs.append(it.invoke_async(inputs))
        if len(jobs) >= inflight:
            jobs.popleft().result()
    while jobs:
        jobs.popleft().result()
    return runs / (time.perf_counter() - start)


def carried(runner: Any) -> list[str]:
    """State a loop carries from call to call: float inputs that are also outputs of the same shape (a KV cache)."""
    ins, outs = runner.get_input_details(), runner.get_output_details()
    return sorted(n for n in set(ins) & set(outs) if np.issubdtype(ins[n]["dtype"], np.floating)
                  and list(ins[n]["shape"]) == list(outs[n]["shape"]) and ins[n]["dtype"] == outs[n]["dtype"])


def resident_call(runner: Any) -> tuple[dict[str, np.ndarray], list[str], Any]:
    """A signature's seeded inputs, its carried state (a decode step's KV cache) and one call that keeps that state
    on the GPU: compiled and run once, each state input then bound to its own output, only the rest read back."""
    inputs = signature_feeds(runner, seed=0)
    state = carried(runner)
    fresh = {n: v for n, v in inputs.items() if n not in state}
    rest = [n for n in runner.get_output_details() if n not in state]
    runner.run(inputs)  # compile; the state's buffers hold a first call's outputs
    for n in state:
        runner.set_input_buffer(n, runner.output_buffer(n))
    return inputs, state, lambda: runner.run(fresh, outputs=rest)


def steps_per_second(step: Any, runs: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(runs):
        step()
    return runs / (time.perf_counter() - start)


def run_signature(args: argparse.Namespace, name: str, data: bytes, key: str, it: Any = None) -> dict[str, Any]:
    """bench MODEL --signature KEY: calls per second of one signature in a loop whose state (inputs that are also
    outputs: a decode step's KV cache) is carried from call to call: by gpuengine on the GPU (reading back only the
    other outputs), by gpuengine and LiteRT CPU through the host."""
    from gpuengine.oracle import litert_interpreter

    it = it or interpreter(data, args)
    try:
        runner = it.get_signature_runner(key)
    except ValueError as e:
        raise SystemExit(f"gpuengine bench: {e}") from None
    inputs, state, call = resident_call(runner)
    resident = steps_per_second(call, args.runs, args.warmup)
    fresh = {n: v for n, v in inputs.items() if n not in state}
    host_state = {n: inputs[n] for n in state}

    def through_host(call: Any) -> Any:
        def step() -> None:
            out = call(**fresh, **host_state)
            host_state.update({n: out[n] for n in state})
        return step

    host = steps_per_second(through_host(runner), args.runs, args.warmup)  # a host value ends each binding
    host_state.update({n: inputs[n] for n in state})
    reference = litert_interpreter(data, num_threads=os.cpu_count()).get_signature_runner(key)
    cpu = steps_per_second(through_host(reference), args.runs, args.warmup)
    program = runner.compiled.gpu_programs
    return {"model": name, "signature": key, "adapter": it.compiled.gpu.name if program else None,
            "dispatches": runner.compiled.dispatches, "carried_on_gpu": state,
            "gpuengine_state_on_gpu_steps_per_s": resident, "gpuengine_through_host_steps_per_s": host,
            "litert_cpu_steps_per_s": cpu}


def print_signature(report: dict[str, Any]) -> None:
    state = report["carried_on_gpu"]
    print(f"model: {report['model']}, signature {report['signature']!r}\nadapter: {report['adapter']}, "
          f"{report['dispatches']} dispatches per call\nstate carried from call to call: {', '.join(state) or 'none'}")
    print(f"{'gpuengine, state on the GPU':<34} {report['gpuengine_state_on_gpu_steps_per_s']:10.1f} steps/s")
    print(f"{'gpuengine, state through the host':<34} {report['gpuengine_through_host_steps_per_s']:10.1f} steps/s")
    print(f"{'LiteRT CPU, state through the host':<34} {report['litert_cpu_steps_per_s']:10.1f} steps/s")


def run_signatures(args: argparse.Namespace, name: str, data: bytes, keys: list[str]) -> int:
    """Each signature in `keys` (--signature KEY: that one; a model with several: every one, saying so); --json: one
    object for one signature, a list for several."""
    it = interpreter(data, args)
    if len(keys) > 1 and not args.json:
        print(f"signatures: {', '.join(keys)} (all; --signature KEY benches one)")
    reports = []
    for key in keys:
        reports.append(run_signature(args, name, data, key, it))
        if not args.json:
            print_signature(reports[-1])
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports))
    return 0


def run(args: argparse.Namespace) -> int:
    from gpuengine.oracle import relative_error

    if getattr(args, "llm", False):
        from .generate import run_bench

        return run_bench(args)
    if getattr(args, "signature", None):
        name, data = models(args)[0]
        return run_signatures(args, name, data, [args.signature])
    compare = [c.strip() for c in args.compare.split(",") if c.strip()] if args.compare else []
    unknown = set(compare) - {"cpu", "litert-gpu"}
    if unknown:
        raise SystemExit(f"gpuengine bench: unknown --compare {sorted(unknown)}; use cpu,litert-gpu")
    name, data = models(args)[0]
    if args.inflight < 1:
        raise SystemExit("gpuengine bench: --inflight must be >= 1")
    from gpuengine.model.reader import read_model

    keys = [s.key for s in read_model(data).signatures]
    if len(keys) > 1:  # a decoder's prefill and decode: each in its own loop
        return run_signatures(args, name, data, keys)
    it = interpreter(data, args, max_inflight=args.inflight)
    inputs = feeds(it, [], seed=0)
    ours, our_out = time_invokes(it, inputs, args.runs, args.warmup)
    ours["gpu_ms"] = gpu_span_ms(it, runs=min(args.runs, 20))
    ours["inflight"] = args.inflight
    ours["throughput_fps"] = throughput(it, inputs, args.inflight, args.runs, args.warmup)
    compiled = it.compiled
    report: dict[str, Any] = {"model": name, "adapter": compiled.gpu.name if compiled.gpu else None,
                              "target": compiled.target.name if compiled.target else None,
                              "tuned": compiled.tuned_dispatches > 0, "tuned_dispatches": compiled.tuned_dispatches,
                              "dispatches": compiled.dispatches, "gpuengine": ours, "litert_cpu": None,
                              "litert_gpu": None, "max_rel_diff": {}}
    for key, accel, flag in (("litert_cpu", "cpu", "cpu"), ("litert_gpu", "gpu", "litert-gpu")):
        if flag not in compare:
            continue
        timing, outs = litert(data, inputs, accel, args.runs, args.warmup)
        report[key] = timing
        if outs:
            report["max_rel_diff"][key] = max(relative_error(our_out[t], outs[t]) for t in outs)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"model: {name}\nadapter: {report['adapter']} (target {report['target']})\ntuned: {report['tuned']} "
          f"({report['tuned_dispatches']} dispatches from the tuning cache)")
    base = ours["median_ms"]
    print(f"{'runtime':<12} {'mean ms':>9} {'median ms':>10} {'p90 ms':>9} {'gpu ms':>8}  vs gpuengine")
    for key in ("gpuengine", "litert_cpu", "litert_gpu"):
        r = report[key]
        if r is None:
            continue
        if "error" in r:
            print(f"{key:<12} could not run: {r['error']}")
            continue
        gpu = f"{r['gpu_ms']:8.3f}" if "gpu_ms" in r else f"{'-':>8}"
        print(f"{key:<12} {r['mean_ms']:9.3f} {r['median_ms']:10.3f} {r['p90_ms']:9.3f} {gpu}  "
              f"{r['median_ms'] / base:5.2f}x time")
    print(f"throughput with {args.inflight} invoke(s) in flight: {ours['throughput_fps']:.1f} frames/s "
          f"(1 / median latency: {1000 / base:.1f})")
    for key, err in report["max_rel_diff"].items():
        print(f"max relative difference vs {key}: {err:.3g}")
    return 0


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="latency vs LiteRT CPU and LiteRT's GPU accelerator")
    bench.add_argument("models", nargs="?", help="model (default: the zoo's mobilenet_v2)")
    bench.add_argument("--runs", type=at_least(1), default=100, help="timed invokes (default 100)")
    bench.add_argument("--warmup", type=at_least(0), default=10, help="untimed invokes first (default 10)")
    bench.add_argument("--compare", default="cpu,litert-gpu", help="comma list of cpu, litert-gpu ('' for none)")
    bench.add_argument("--inflight", type=int, default=1,
                       help="invokes in flight for the throughput figure (Interpreter.invoke_async)")
    bench.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    bench.add_argument("--signature", help="time this signature's calls in a loop carrying its state (decode "
                                            "steps per second), beside LiteRT CPU")
    from .generate import add_bench_options

    add_bench_options(bench)
    add_engine_options(bench)
    bench.set_defaults(func=run)
