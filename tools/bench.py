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

from .common import add_engine_options, feeds, gpu_span_ms, interpreter, models
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


def run(args: argparse.Namespace) -> int:
    from gpuengine.oracle import relative_error

    compare = [c.strip() for c in args.compare.split(",") if c.strip()] if args.compare else []
    unknown = set(compare) - {"cpu", "litert-gpu"}
    if unknown:
        raise SystemExit(f"gpuengine bench: unknown --compare {sorted(unknown)}; use cpu,litert-gpu")
    name, data = models(args)[0]
    if args.inflight < 1:
        raise SystemExit("gpuengine bench: --inflight must be >= 1")
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


def add_subcommand(sub: Any) -> None:
    bench = sub.add_parser("bench", help="latency vs LiteRT CPU and LiteRT's GPU accelerator")
    bench.add_argument("models", nargs="?", help="model (default: the zoo's mobilenet_v2)")
    bench.add_argument("--runs", type=int, default=100)
    bench.add_argument("--warmup", type=int, default=10)
    bench.add_argument("--compare", default="cpu,litert-gpu", help="comma list of cpu, litert-gpu ('' for none)")
    bench.add_argument("--inflight", type=int, default=1,
                       help="invokes in flight for the throughput figure (Interpreter.invoke_async)")
    bench.add_argument("--json", action="store_true")
    add_engine_options(bench)
    bench.set_defaults(func=run)
