"""CLI subcommands for timing: bench, profile, tune (registered into tools/cli.py's parser)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..tools.cli import _feeds, _interpreter, load_model
from .litert_runner import time_invokes


def _models(args: Any) -> list[tuple[str, bytes]]:
    specs = args.models if isinstance(args.models, list) else [args.models]
    return [load_model(m) for m in (specs or [None])]


def _primed(data: bytes, args: Any, cache: str | None = None) -> Any:
    """An interpreter that has run once on random values for every input (buffers hold real data)."""
    it = _interpreter(data, args, cache)
    for t, v in _feeds(it, [], seed=0).items():
        it.set_tensor(t, v)
    it.invoke()
    return it


def gpu_time_ms(it: Any, runs: int = 10) -> float:
    from gpuengine.runtime.timing import DispatchTimer

    return sum(DispatchTimer(p).measure(runs=runs).total_ns for p in it.compiled.gpu_programs) / 1e6


def _litert(model: bytes, feeds: dict[int, np.ndarray], accel: str, runs: int, warmup: int) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        model_path, in_path, out_path = (os.path.join(tmp, n) for n in ("m.tflite", "in.npz", "out.npz"))
        Path(model_path).write_bytes(model)
        np.savez(in_path, **{str(k): v for k, v in feeds.items()})
        try:
            proc = subprocess.run([sys.executable, "-m", "gpuengine.tuning.litert_runner", in_path, out_path,
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


def cmd_bench(args: Any) -> int:
    from gpuengine.testing import relative_error

    compare = [c.strip() for c in args.compare.split(",") if c.strip()] if args.compare else []
    unknown = set(compare) - {"cpu", "litert-gpu"}
    if unknown:
        raise SystemExit(f"gpuengine bench: unknown --compare {sorted(unknown)}; use cpu,litert-gpu")
    name, data = _models(args)[0]
    it = _interpreter(data, args)
    feeds = _feeds(it, [], seed=0)
    ours, our_out = time_invokes(it, feeds, args.runs, args.warmup)
    ours["gpu_ms"] = gpu_time_ms(it, runs=min(args.runs, 20))
    report: dict[str, Any] = {"model": name, "adapter": it.compiled.gpu.name if it.compiled.gpu else None,
                              "tuned": it.compiled.tuned_dispatches > 0, "tuned_dispatches":
                              it.compiled.tuned_dispatches, "gpuengine": ours, "litert_cpu": None,
                              "litert_gpu": None, "max_rel_diff": {}}
    for key, accel in (("litert_cpu", "cpu"), ("litert_gpu", "gpu")):
        if (accel if accel == "cpu" else "litert-gpu") not in compare:
            continue
        timing, outs = _litert(data, feeds, accel, args.runs, args.warmup)
        report[key] = timing
        if outs:
            report["max_rel_diff"][key] = max(relative_error(our_out[t], outs[t]) for t in outs)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"model: {name}\nadapter: {report['adapter']}\ntuned: {report['tuned']} "
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
        gpu = f"{r['gpu_ms']:8.2f}" if "gpu_ms" in r else f"{'-':>8}"
        print(f"{key:<12} {r['mean_ms']:9.2f} {r['median_ms']:10.2f} {r['p90_ms']:9.2f} {gpu}  "
              f"{r['median_ms'] / base:5.2f}x time")
    for key, err in report["max_rel_diff"].items():
        print(f"max relative difference vs {key}: {err:.3g}")
    return 0


def cmd_profile(args: Any) -> int:
    from gpuengine.runtime.timing import DispatchTimer

    name, data = _models(args)[0]
    it = _interpreter(data, args)
    feeds = _feeds(it, [], seed=0)
    e2e, _ = time_invokes(it, feeds, args.runs, 3)
    graph = it.compiled.graph
    rows, total_ns, span_ns, encode_ms, method = [], 0.0, 0.0, 0.0, ""
    for prog in it.compiled.gpu_programs:
        timing = DispatchTimer(prog).measure(runs=args.runs)
        method = timing.method
        span_ns += timing.total_ns
        total_ns += sum(timing.per_dispatch_ns)
        for d, ns in zip(prog.dispatches, timing.per_dispatch_ns):
            rows.append({"kernel": d.spec.shader, "ops": [graph.ops[i].code for i in d.spec.ops] or [d.spec.label],
                         "workgroup": list(d.spec.workgroup), "grid": list(d.groups), "gpu_ns": ns})
        start = time.perf_counter()
        for _ in range(args.runs):
            enc = prog.gpu.device.create_command_encoder()
            cp = enc.begin_compute_pass()
            for pipeline, bind_group, x, y, z in prog._hot:  # noqa: SLF001 - measuring the hot loop itself
                cp.set_pipeline(pipeline)
                cp.set_bind_group(0, bind_group)
                cp.dispatch_workgroups(x, y, z)
            cp.end()
            enc.finish()
        encode_ms += (time.perf_counter() - start) * 1e3 / args.runs
    for r in rows:
        r["share"] = r["gpu_ns"] / total_ns if total_ns else 0.0
    report = {"model": name, "adapter": it.compiled.gpu.name if it.compiled.gpu else None, "method": method,
              "dispatches": rows, "gpu_total_ms": total_ns / 1e6, "gpu_span_ms": span_ns / 1e6,
              "host_encode_ms": encode_ms, "end_to_end_ms": e2e["median_ms"]}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"model: {name}\nadapter: {report['adapter']} (timing: {method})")
    print(f"{'#':>4} {'kernel':<22} {'ops':<34} {'workgroup':<10} {'grid':<14} {'gpu us':>9} {'share':>6}")
    for k, r in enumerate(rows):
        print(f"{k:>4} {r['kernel']:<22} {'+'.join(r['ops'])[:34]:<34} {'x'.join(map(str, r['workgroup'])):<10} "
              f"{'x'.join(map(str, r['grid'])):<14} {r['gpu_ns'] / 1e3:9.1f} {r['share']:6.1%}")
    print(f"GPU time: sum of dispatches {report['gpu_total_ms']:.3f} ms, measured span {report['gpu_span_ms']:.3f} ms")
    print(f"host encode: {encode_ms:.3f} ms per invoke; end to end: {report['end_to_end_ms']:.3f} ms per invoke")
    return 0


def cmd_tune(args: Any) -> int:
    from tqdm import tqdm

    from gpuengine.runtime.timing import DispatchTimer
    from gpuengine.tuning.cache import TuningCache
    from gpuengine.tuning.search import Limits, tune_workgroup

    cache = TuningCache(args.cache)
    models = _models(args)
    jobs: dict[str, tuple[Any, int, Any]] = {}  # signature -> (program, dispatch index, interpreter)
    before: dict[str, float] = {}
    its = []
    for _name, data in models:
        it = _primed(data, args, cache=os.devnull)  # tune from defaults, not from an older cache
        its.append(it)
        for prog in it.compiled.gpu_programs:
            for i, d in enumerate(prog.dispatches):
                if prog.tunable[i]:
                    jobs.setdefault(prog.signature(d.spec), (prog, i, it))
    if not jobs:
        print("nothing to tune: no tunable GPU dispatch")
        return 0
    first_prog = next(iter(jobs.values()))[0]
    gpu = first_prog.gpu
    limits = Limits(int(gpu.limits.get("max-compute-invocations-per-workgroup", 256)),
                    (int(gpu.limits.get("max-compute-workgroup-size-x", 256)),
                     int(gpu.limits.get("max-compute-workgroup-size-y", 256)),
                     int(gpu.limits.get("max-compute-workgroup-size-z", 64))))
    deadline = time.monotonic() + args.budget
    # Defaults first, so the budget goes where the time is.
    timers = {}
    weights = {}
    for sig, (prog, i, _) in jobs.items():
        timer = timers.setdefault(id(prog), DispatchTimer(prog))
        weights[sig] = timer.measure(runs=3, warmup=1, dispatches=[prog._hot[i]]).total_ns  # noqa: SLF001
    total_weight = sum(weights.values()) or 1.0
    results = {}
    bar = tqdm(jobs.items(), desc="tuning kernels", unit="kernel", file=sys.stderr, disable=args.json)
    for sig, (prog, i, _) in bar:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        budget = max(0.2, remaining * weights[sig] / total_weight)
        total_weight -= weights[sig]
        timer = timers[id(prog)]

        def measure(wg: tuple[int, int, int], prog: Any = prog, i: int = i, timer: Any = timer) -> float:
            return timer.measure(runs=3, warmup=1, dispatches=[prog.variant(i, wg)]).total_ns

        spec = prog.dispatches[i].spec
        res = tune_workgroup(measure, tuple(spec.workgroup), spec.grid, limits, min(budget, remaining))
        results[sig] = res
        cache.record(gpu.cache_key(), gpu.name, sig, res.best, res.default_ns, res.best_ns)
    cache.save()
    # Before/after, interleaved (default, tuned, default, ...) so drift and noise hit both alike.
    after = {}
    for (name, data), it_default in zip(models, its):
        it_tuned = _primed(data, args, cache=str(cache.path))
        pairs = [(gpu_time_ms(it_default, runs=5), gpu_time_ms(it_tuned, runs=5)) for _ in range(3)]
        before[name] = float(np.median([p[0] for p in pairs]))
        after[name] = float(np.median([p[1] for p in pairs]))
    report = {"adapter": gpu.name, "cache": str(cache.path), "kernels_total": len(jobs), "kernels_tuned": len(results),
              "kernels": [{"signature": s[:80], "default": list(r.default), "tuned": list(r.best),
                           "default_us": r.default_ns / 1e3, "tuned_us": r.best_ns / 1e3, "evaluated": len(r.evaluated)}
                          for s, r in results.items()],
              "models": {n: {"gpu_ms_default": before[n], "gpu_ms_tuned": after[n]} for n in before}}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"adapter: {gpu.name}\ncache: {cache.path}\ntuned {len(results)}/{len(jobs)} kernel signatures")
    print(f"{'kernel':<40} {'default':<10} {'tuned':<10} {'default us':>11} {'tuned us':>9}")
    for k in report["kernels"]:
        print(f"{k['signature'][:40]:<40} {'x'.join(map(str, k['default'])):<10} {'x'.join(map(str, k['tuned'])):<10} "
              f"{k['default_us']:11.1f} {k['tuned_us']:9.1f}")
    for n, m in report["models"].items():
        gain = m["gpu_ms_default"] / m["gpu_ms_tuned"] if m["gpu_ms_tuned"] else 1.0
        print(f"{n}: GPU time {m['gpu_ms_default']:.3f} ms -> {m['gpu_ms_tuned']:.3f} ms ({gain:.2f}x)")
    return 0


def add_subcommands(sub: Any, common: Callable[[Any], None]) -> None:
    bench = sub.add_parser("bench", help="latency vs LiteRT CPU and LiteRT's GPU accelerator")
    bench.add_argument("models", nargs="?", help="model (default: the zoo's mobilenet_v2)")
    bench.add_argument("--runs", type=int, default=100)
    bench.add_argument("--warmup", type=int, default=10)
    bench.add_argument("--compare", default="cpu,litert-gpu", help="comma list of cpu, litert-gpu ('' for none)")
    bench.add_argument("--json", action="store_true")
    bench.add_argument("--cache", help="tuning cache (default: $GPUENGINE_TUNE_CACHE or ~/.cache/gpuengine)")
    common(bench)
    bench.set_defaults(func=cmd_bench)
    prof = sub.add_parser("profile", help="GPU time per dispatch (timestamp queries)")
    prof.add_argument("models", nargs="?", help="model (default: the zoo's mobilenet_v2)")
    prof.add_argument("--runs", type=int, default=10)
    prof.add_argument("--json", action="store_true")
    prof.add_argument("--cache", help="tuning cache to run with")
    common(prof)
    prof.set_defaults(func=cmd_profile)
    tune = sub.add_parser("tune", help="search workgroup sizes per kernel; results go to the tuning cache")
    tune.add_argument("models", nargs="*", help="models (default: the zoo's mobilenet_v2)")
    tune.add_argument("--budget", type=float, default=60.0, help="seconds of search in all")
    tune.add_argument("--cache", help="cache path (default: $GPUENGINE_TUNE_CACHE or ~/.cache/gpuengine/tuning.json)")
    tune.add_argument("--json", action="store_true")
    common(tune)
    tune.set_defaults(func=cmd_tune)
