"""`gpuengine tune`: search each kernel's decomposition (tile, split, tiles per workgroup, reduction mode) or, for
kernels without decompositions, its workgroup size; keep the winners per adapter in the tuning cache.

A decomposable kernel's candidates are ranked by the latency model (latency/latency.py: the adapter's fit from
`gpuengine calibrate`, else its class's built-in description) and only the best quarter is measured besides the
default; `--measure-all` searches them all as before, and the report says how often the model's first choice
was the fastest measured. Workgroup sizes of the other kernels are searched as before (the model does not rank
workgroup shapes). Every candidate is timed as `bench` times a model (runtime/timing.py `span`): in one compute
pass with timestamps only at its ends, on a GPU kept at its working clocks, here with the kernel recorded several times
back to back (each run reads what the previous wrote, as in a model) so a pass lasts long enough to time.
Afterwards each model runs with the winners and must give the outputs it gave before (else its winners are
dropped), and its GPU time and end-to-end latency are measured before and after, interleaved, the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .common import add_engine_options, feeds, gpu_span_ms, models, primed
from .litert_runner import time_invokes

TARGET_PASS_NS = 200_000  # repeat a kernel until one timed pass lasts about this long
MAX_REPEAT = 200


@dataclass
class Job:
    """One kernel to tune: where it runs, and the cache key its choice is stored under."""

    key: str
    program: Any
    index: int
    models: list[str]


def jobs_of(its: list[tuple[str, Any]]) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    for name, it in its:
        for prog in it.compiled.gpu_programs:
            for i, d in enumerate(prog.dispatches):
                if not prog.tunable[i]:
                    continue
                key = d.spec.variants.problem if d.spec.variants is not None else prog.signature(d.spec)
                job = jobs.setdefault(key, Job(key, prog, i, []))
                if name not in job.models:
                    job.models.append(name)
    return jobs


def tune_one(job: Job, timer: Any, budget: float, measure_all: bool = False) -> tuple[Any, Any, Any]:
    """(search result, default choice, the latency model's first choice or None) for one kernel.

    A decomposable kernel has its candidates ranked by the latency model (latency/latency.py, on the adapter's
    fit or its class's built-in description) and only the best quarter is measured, besides the default;
    `measure_all` searches as before the model (every candidate nearest the default first, then neighbours)."""
    from gpuengine.latency import latency
    from gpuengine.lowering.kernels.dispatch_cost import dispatch_cost
    from gpuengine.tuning.search import Limits, decomposition_space, search, tune_workgroup

    from .profile import device_of

    prog, i = job.program, job.index
    spec = prog.dispatches[i].spec
    timer.warm_up()
    single = timer.span(runs=3, dispatches=[prog.hot_dispatches[i]], warmup_s=0)
    repeat = int(min(MAX_REPEAT, max(1, TARGET_PASS_NS // max(1.0, single))))

    def timed(hot: Any) -> float:
        return timer.span(runs=3, dispatches=[hot], repeat=repeat, warmup_s=0)

    max_inv = int(prog.gpu.limits.get("max-compute-invocations-per-workgroup", 256))
    if spec.variants is not None:
        default = spec.decomposition
        candidates, around = decomposition_space(spec.variants, default, prog.target.subgroups, max_inv)
        base = dispatch_cost(spec, prog.graph, prog.precision)
        ranked = [d for _, d in latency.rank(spec.variants, candidates, device_of(prog), base)]
        first = ranked[0] if ranked else None

        def measure(d: Any) -> float:
            return timed(prog.variant(i, decomposition=d))

        if measure_all:
            return search(measure, default, candidates, around, budget, repeats=1), default, first
        # a quarter of the candidates in all, the default (normally the model's own first choice) among them
        best_few = ranked[:max(1, len(candidates) // 4)]
        if default not in best_few:
            best_few = best_few[:-1]
        return search(measure, default, best_few, lambda d: [], budget, repeats=1), default, first
    limits = Limits(max_inv, (int(prog.gpu.limits.get("max-compute-workgroup-size-x", 256)),
                              int(prog.gpu.limits.get("max-compute-workgroup-size-y", 256)),
                              int(prog.gpu.limits.get("max-compute-workgroup-size-z", 64))))
    default = tuple(spec.workgroup)
    result = tune_workgroup(lambda wg: timed(prog.variant(i, workgroup=wg)), default, spec.grid, limits, budget,
                            repeats=1)
    return result, default, None


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from gpuengine.oracle import relative_error
    from gpuengine.runtime.timing import DispatchTimer
    from gpuengine.tuning.cache import TuningCache

    cache = TuningCache(args.cache)
    named = models(args)
    defaults = [(name, primed(data, args, cache=os.devnull)) for name, data in named]  # from the defaults
    jobs = jobs_of(defaults)
    if not jobs:
        print("nothing to tune: no GPU dispatch")
        return 0
    first = next(iter(jobs.values())).program
    gpu, target = first.gpu, first.target
    timers: dict[int, Any] = {}
    # Default times first, so the budget goes where the time is.
    weights = {}
    for key, job in jobs.items():
        timer = timers.setdefault(id(job.program), DispatchTimer(job.program))
        weights[key] = timer.span(runs=3, dispatches=[job.program.hot_dispatches[job.index]],
                                  warmup_s=0)
    remaining_weight = sum(weights.values()) or 1.0
    deadline = time.monotonic() + args.budget
    results: dict[str, tuple[Any, Any, Any]] = {}
    bar = tqdm(list(jobs.items()), desc="tuning kernels", unit="kernel", file=sys.stderr, disable=args.json)
    for key, job in bar:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        budget = min(left, max(0.2, left * weights[key] / remaining_weight))
        remaining_weight -= weights[key]
        bar.set_postfix_str(job.program.dispatches[job.index].spec.label[:40])
        result, default, first = tune_one(job, timers[id(job.program)], budget, args.measure_all)
        results[key] = (result, default, first)
        cache.record(gpu.cache_key(), gpu.name, key, result.best, result.default_ns, result.best_ns)
    cache.save()

    model_reports = {}
    for (name, data), (_, before_it) in zip(named, defaults):
        after_it = primed(data, args, cache=str(cache.path))
        inputs = feeds(before_it, [], seed=1)
        _, out_before = time_invokes(before_it, inputs, 1, 0)
        _, out_after = time_invokes(after_it, inputs, 1, 0)
        error = max((relative_error(out_after[t], out_before[t]) for t in out_before), default=0.0)
        entry: dict[str, Any] = {"max_rel_diff": error, "tuned_dispatches": after_it.compiled.tuned_dispatches}
        if error > 1e-4:  # a decomposition that is wrong on this adapter must never be kept
            dropped = [k for k, j in jobs.items() if name in j.models]
            kernels = cache.data["devices"].get(gpu.cache_key(), {}).get("kernels", {})
            for k in dropped:
                kernels.pop(k, None)
            cache.save()
            entry["verification"] = f"failed: outputs moved by {error:.3g}; {len(dropped)} entries dropped"
        else:
            entry["verification"] = "ok"
            pairs = [(gpu_span_ms(before_it, runs=10), gpu_span_ms(after_it, runs=10)) for _ in range(3)]
            e2e = [(time_invokes(before_it, inputs, 20, 2)[0]["median_ms"],
                    time_invokes(after_it, inputs, 20, 2)[0]["median_ms"]) for _ in range(3)]
            entry.update(gpu_ms_default=float(np.median([p[0] for p in pairs])),
                         gpu_ms_tuned=float(np.median([p[1] for p in pairs])),
                         e2e_ms_default=float(np.median([p[0] for p in e2e])),
                         e2e_ms_tuned=float(np.median([p[1] for p in e2e])))
        model_reports[name] = entry

    def describe(choice: Any) -> Any:
        return choice.to_json() if hasattr(choice, "to_json") else list(choice)

    report = {"adapter": gpu.name, "target": target.name, "cache": str(cache.path), "kernels_total": len(jobs),
              "kernels_tuned": len(results),
              "kernels": [{"key": k[:100], "label": jobs[k].program.dispatches[jobs[k].index].spec.label[:60],
                           "default": describe(d), "tuned": describe(r.best), "default_us": r.default_ns / 1e3,
                           "tuned_us": r.best_ns / 1e3, "evaluated": len(r.evaluated),
                           "predicted_first": describe(f) if f is not None else None,
                           "predicted_first_is_best": (f in r.evaluated and r.evaluated[f] <= min(r.evaluated.values()))
                           if f is not None else None}
                          for k, (r, d, f) in results.items()],
              "models": model_reports}
    ranked = [k for k in report["kernels"] if k["predicted_first_is_best"] is not None]
    report["measured"] = sum(k["evaluated"] for k in report["kernels"])
    report["prediction_first_was_best"] = (sum(bool(k["predicted_first_is_best"]) for k in ranked), len(ranked))
    if args.json:
        print(json.dumps(report))
        return 0
    hits, ranked_kernels = report["prediction_first_was_best"]
    print(f"adapter: {gpu.name} (target {target.name})\ncache: {cache.path}\n"
          f"tuned {len(results)}/{len(jobs)} kernels, {report['measured']} measurements; the latency model's first "
          f"choice was the fastest measured for {hits} of {ranked_kernels} decomposable kernels"
          f"{' (all candidates measured)' if args.measure_all else ' (its best quarter measured)'}")
    print(f"{'kernel':<44} {'default us':>11} {'tuned us':>9}  tuned choice")
    for k in report["kernels"]:
        print(f"{k['label'][:44]:<44} {k['default_us']:11.2f} {k['tuned_us']:9.2f}  {k['tuned']}")
    for name, m in model_reports.items():
        if m["verification"] != "ok":
            print(f"{name}: verification {m['verification']}")
            continue
        print(f"{name}: GPU time {m['gpu_ms_default']:.3f} ms -> {m['gpu_ms_tuned']:.3f} ms "
              f"({m['gpu_ms_default'] / max(m['gpu_ms_tuned'], 1e-9):.2f}x); end to end {m['e2e_ms_default']:.3f} "
              f"-> {m['e2e_ms_tuned']:.3f} ms; outputs within {m['max_rel_diff']:.2g} of the defaults'")
    return 0


def add_parser(sub: Any) -> None:
    tune = sub.add_parser("tune", help="search decompositions and workgroup sizes per kernel; results go to the "
                                       "tuning cache")
    tune.add_argument("models", nargs="*", help="models (default: the zoo's mobilenet_v2)")
    tune.add_argument("--budget", type=float, default=60.0, help="seconds of search in all")
    tune.add_argument("--measure-all", action="store_true",
                      help="search every decomposition (as before the latency model) instead of measuring only "
                           "the quarter the model predicts fastest")
    tune.add_argument("--json", action="store_true", help="print the results as JSON")
    add_engine_options(tune)
    tune.set_defaults(func=run)
