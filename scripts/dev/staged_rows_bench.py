"""Time the hybrid FC's staged-row form against the unstaged one on this machine's adapter (issue 32).

Writes a SmolLM-shaped decoder (scripts/dev/write_decoder.py, --layers layers), compiles its decode signature on
the `cpu` target, and for every hybrid FULLY_CONNECTED dispatch that offers the staged form re-decomposes it
(GpuProgram.replace) to the best unstaged and the best staged candidate by the adapter's latency model, times each
(timestamp queries, DispatchTimer: median of 3 measurements of `--runs` runs) and prints one JSON line per form:
measured and predicted us, and whether the logits equal the compiled plan's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.helpers import decode_feeds  # noqa: E402  (the test suite's decode inputs, one definition)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hybrid", choices=("integer", "float"), default="integer")
    args = parser.parse_args(argv)

    from gpuengine import Interpreter
    from gpuengine.latency.latency import candidate_cost, predict_ns
    from gpuengine.lowering.kernels.dispatch_cost import dispatch_cost
    from gpuengine.runtime.timing import DispatchTimer
    from tools.profile import device_of

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "decoder.tflite")
        subprocess.run([sys.executable, str(ROOT / "scripts/dev/write_decoder.py"), "--layers", str(args.layers),
                        path], check=True)
        it = Interpreter(model_path=path, target="cpu", workgroup_cache="/nonexistent/cache.json",
                         hybrid_arithmetic=args.hybrid)
        runner = it.get_signature_runner("decode")
        feeds = decode_feeds(runner)
        planned = runner(**feeds)["logits"]
    (prog,) = runner.compiled.gpu_programs
    device = device_of(prog)
    for index, dispatch in enumerate(list(prog.dispatches)):
        variants = dispatch.spec.variants
        if dispatch.spec.shader != "fully_connected_int8" or not any(d.staged for d in variants.candidates):
            continue
        base = dispatch_cost(dispatch.spec, prog.graph, prog.precision)
        ranked = sorted((predict_ns(candidate_cost(variants, d, base), device), i, d)
                        for i, d in enumerate(variants.candidates))
        chosen = dispatch.spec.decomposition
        for kind, staged in (("unstaged", False), ("staged", True)):
            d = next(d for _, _, d in ranked if d.staged == staged)
            prog.replace(index, d)
            same = bool(np.array_equal(runner(**feeds)["logits"], planned))
            measured = float(np.median([DispatchTimer(prog).measure(runs=args.runs).per_dispatch_ns[index]
                                        for _ in range(3)]))
            spec = prog.dispatches[index].spec
            print(json.dumps({"index": index, "dispatch": spec.label.split(":")[0], "form": kind,
                              "decomposition": d.describe(), "measured_us": round(measured / 1e3, 1),
                              "predicted_us": round(predict_ns(dispatch_cost(spec, prog.graph, prog.precision),
                                                               device) / 1e3, 1),
                              "logits_equal_plan": same}), flush=True)
        prog.replace(index, chosen)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
