"""`gpuengine run MODEL`: run a model once (seeded random inputs unless given) and check it against LiteRT."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import add_engine_options, feeds, interpreter, load_model


def cmd_run(args: argparse.Namespace) -> int:
    from gpuengine.oracle import relative_error, run_litert

    name, data = load_model(args.model)
    t0 = time.perf_counter()
    it = interpreter(data, args)
    compile_ms = (time.perf_counter() - t0) * 1e3
    inputs = feeds(it, args.input, args.seed)
    for t, v in inputs.items():
        it.set_tensor(t, v)
    it.invoke()  # warm-up
    times = []
    for _ in range(max(1, args.runs)):
        t0 = time.perf_counter()
        it.invoke()
        times.append((time.perf_counter() - t0) * 1e3)
    outputs = {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    compiled = it.compiled
    print(f"model: {name}")
    print(f"adapter: {compiled.gpu.name if compiled.gpu else 'none'}"
          + (f" (target {compiled.target.describe()})" if compiled.target else ""))
    print(f"ops on GPU: {compiled.plan.ops_gpu}/{len(compiled.plan.graph.ops)}, partitions: "
          f"{len(compiled.plan.partitions)}, dispatches: {compiled.dispatches}, compile: {compile_ms:.0f} ms")
    print(f"invoke: median {np.median(times):.2f} ms over {len(times)} runs")
    try:
        ref = run_litert(data, inputs)
    except ImportError:
        ref = None
        print("LiteRT not installed: no comparison (pip install 'gpuengine[litert]')")
    worst = 0.0
    for d in it.get_output_details():
        out = outputs[d["index"]]
        line = f"output {d['name']}: shape {tuple(out.shape)} {out.dtype}"
        if ref is not None:
            r = ref[d["index"]]
            err = relative_error(out, r)
            worst = max(worst, err)
            line += f", max |diff| vs LiteRT {np.max(np.abs(out.astype(np.float64) - r), initial=0):.3g} " \
                    f"(relative {err:.3g})"
        print(line)
        if args.output_dir:
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in d["name"])
            np.save(Path(args.output_dir) / f"{safe}.npy", out)
    if ref is not None and worst > args.tolerance:
        print(f"FAIL: outputs differ from LiteRT by {worst:.3g} > {args.tolerance}", file=sys.stderr)
        return 1
    return 0



def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run a model once (random seeded inputs unless given) and check it vs LiteRT")
    run.add_argument("model", nargs="?", help="a .tflite path, a zoo name or a reference model name")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--output-dir")
    run.add_argument("--runs", type=int, default=10)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--tolerance", type=float, default=1e-4, help="max relative difference to LiteRT")
    add_engine_options(run)
    run.set_defaults(func=cmd_run)
