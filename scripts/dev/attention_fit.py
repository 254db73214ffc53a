"""Fit the attention templates' efficiency on this adapter (lavapipe's entries in gpuengine/latency/devices.py).

ATTENTION alone (tests/ops/test_attention_sizes.py's builder; its mask an input, so every key is read, as the model
counts): decode at head dims 64 / 128 / 256, two short prefills and one over long rows (attention.long_rows), each in
the decomposition the `discrete` and the `cpu` targets choose and `--alternatives` others
(tuning/calibrate.measure_program: the least of `--runs` passes, over `--turns` turns). Prints each sample measured
and predicted before / after, the median errors and the fitted efficiencies (JSON), as lasnet_bench.py --calibrate
does for the LASNet kernels.

    python scripts/dev/attention_fit.py [--runs 5] [--turns 2] [--alternatives 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

from gpuengine import Interpreter
from gpuengine.latency import devices
from gpuengine.latency.latency import predict_ns
from gpuengine.tuning.calibrate import measure_program, relative_errors
from gpuengine.tuning.sparse import fit

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "tests" / "ops"), str(Path(__file__).resolve().parents[2]
                                                                                  / "tests")]
from test_attention_sizes import feeds, gqa_attention  # noqa: E402 - the tests' builder

TEMPLATES = ("attention", "attention_partials", "attention_lanes")
# (head dim, KV heads, query heads per KV head, queries, keys, mask)
CASES = [(64, 3, 3, 1, 256, True), (128, 2, 4, 1, 1024, True), (256, 1, 4, 1, 512, True),
         (256, 1, 4, 1, 1024, True), (64, 3, 3, 1, 64, True), (64, 3, 3, 8, 256, True),
         (256, 1, 4, 8, 512, True), (128, 2, 4, 16, 512, True)]  # the last two: long rows (flash-decoding's forms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--alternatives", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    programs = []
    for case in CASES:
        for target in ("discrete", "cpu"):
            it = Interpreter(model_content=gqa_attention(*case), target=target, workgroup_cache="/nonexistent/c.json")
            it.allocate_tensors()
            for t, v in feeds(*case).items():
                it.set_tensor(t, v)
            it.invoke()
            programs.append((f"{case[:5]} {target}", it))
    samples: list = []
    for _ in range(max(1, args.turns)):
        got = []
        for name, it in programs:
            got += [s for s in measure_program(it, name, runs=args.runs, alternatives=args.alternatives)
                    if s.cost.kernel in TEMPLATES]
        samples = got if not samples else [dataclasses.replace(s, measured_ns=min(s.measured_ns, g.measured_ns))
                                           for s, g in zip(samples, got)]
    print(f"load average after: {os.getloadavg()}")
    base = devices.lavapipe()
    before = dataclasses.replace(base, efficiency={k: v for k, v in base.efficiency.items() if k not in TEMPLATES})
    fitted = fit(samples, dataclasses.replace(before, efficiency={}))
    found = {k: round(v, 3) for k, v in fitted.efficiency.items() if k in TEMPLATES}
    after = dataclasses.replace(before, efficiency={**before.efficiency, **found})
    for s in samples:
        print(f"{s.group:34s} {s.cost.kernel:19s} {'*' if s.default else ' '} invocations {s.cost.invocations:6d} "
              f"measured {s.measured_ns / 1e3:8.0f} us, predicted {predict_ns(s.cost, before) / 1e3:8.0f} before, "
              f"{predict_ns(s.cost, after) / 1e3:8.0f} after")
    for kernel in TEMPLATES:
        kept = [s for s in samples if s.cost.kernel == kernel]
        if kept:
            print(f"{kernel}: {len(kept)} samples, median error {np.median(relative_errors(kept, before)):.1%} "
                  f"before, {np.median(relative_errors(kept, after)):.1%} after")
    print(f"all {len(samples)}: median error {np.median(relative_errors(samples, before)):.1%} before, "
          f"{np.median(relative_errors(samples, after)):.1%} after")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
