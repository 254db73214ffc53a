"""`gpuengine calibrate`: fit the latency model's free parameters (latency/latency.py FITTED) to the device in
hand, from probe kernels (tuning/calibrate.py probe_model, each decomposable dispatch in several
decompositions) and the dispatches of the models named; saved beside the tuning cache (latency.json), per
adapter, where `predict --fit`, the decomposition policy and `tune` find it. Prints the fit's error on the
samples and, fitted again without every third dispatch, its error on those held out.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from .common import add_engine_options, at_least, interpreter, load_model, predicted_vs_measured


def collect(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """(the first program's GpuDevice and target, samples) over the probes and the named models."""
    from gpuengine.tuning import calibrate

    named = [("probes", calibrate.probe_model(args.scale)), ("gathers", calibrate.gather_probe_model())]
    named += [load_model(m) for m in args.models]
    samples, first = [], None
    deadline = time.monotonic() + args.budget
    for name, data in named:
        it = interpreter(data, args, cache=args.cache)
        if not it.compiled.gpu_programs:
            continue
        first = first or it.compiled.gpu_programs[0]
        samples += calibrate.measure_program(it, name, runs=args.runs, alternatives=args.alternatives,
                                             deadline=deadline)
    if first is None:
        raise SystemExit("gpuengine: nothing to calibrate: no GPU dispatch")
    return first, samples


def plot(samples: list[Any], device: Any, path: str) -> None:
    from gpuengine.latency.latency import predict_ns

    predicted_vs_measured([s.measured_ns / 1e3 for s in samples], [predict_ns(s.cost, device) / 1e3 for s in samples],
                          path, "measured us", "predicted us", f"latency model on {device.name[:40]}")


def run(args: argparse.Namespace) -> int:
    try:
        import scipy.optimize  # noqa: F401 - the fit and its report need it
    except ImportError:
        raise SystemExit("gpuengine: calibrate needs scipy: pip install gpuengine[calibrate]") from None
    from gpuengine.latency import devices
    from gpuengine.tuning import calibrate

    prog, samples = collect(args)
    gpu = prog.gpu
    base = devices.lavapipe() if gpu.is_software else devices.for_target(prog.target)
    held = calibrate.holdout(samples, base)
    device = calibrate.fit(samples, base, source=f"fitted on {gpu.name} ({len(samples)} dispatches)")
    device = type(device)(**{**device.to_json(), "name": gpu.name, "target": prog.target.name})
    summary = {"adapter": gpu.name, "adapter_key": gpu.cache_key(), "base": base.name,
               "fit": calibrate.report(samples, device), "holdout": held.to_json(),
               "parameters": {k: v for k, v in device.to_json().items()}}
    path = devices.fit_path(args.cache)
    if not args.dry_run:
        devices.save_fit(path, gpu.cache_key(), device, summary)
        summary["saved"] = str(path)
    if args.plot:
        plot(samples, device, args.plot)
    if args.json:
        print(json.dumps(summary))
        return 0
    fit, hold = summary["fit"], summary["holdout"]
    print(f"adapter: {gpu.name}\nsamples: {len(samples)} dispatches (probes and {len(args.models)} model(s))")
    print(f"fit on all: median error {fit['median_error']:.1%}; held out ({hold['held_out']} samples, fitted on "
          f"{hold['fitted_on']}): median error {hold['median_error']:.1%}; Spearman per held-out dispatch "
          f"{', '.join(f'{v:.2f}' for v in hold['spearman'].values()) or '-'}")
    for k in ("unit_ns", "invocation_ns", "dispatch_ns", "workgroup_ns", "barrier_ns", "bandwidth_gbs"):
        print(f"  {k:<14} {getattr(device, k):12.4g}")
    print(f"saved to {path}" if not args.dry_run else "not saved (--dry-run)")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="fit the latency model to this device (probe kernels and models)")
    p.add_argument("models", nargs="*", help="models whose dispatches are timed too (default: the probes only)")
    p.add_argument("--runs", type=at_least(1), default=8, help="timed passes per sample (the fastest is kept)")
    p.add_argument("--alternatives", type=int, default=3, help="other decompositions timed per dispatch")
    p.add_argument("--scale", type=int, default=2, help="spatial scale of the probe net")
    p.add_argument("--budget", type=float, default=120.0, help="seconds to spend measuring (about)")
    p.add_argument("--plot", default=None, help="save predicted vs measured (needs matplotlib)")
    p.add_argument("--dry-run", action="store_true", help="fit and report, but do not save")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    add_engine_options(p)
    p.set_defaults(func=run)
