"""Figures for docs/design/dycl.md: DyCL's dynamic networks (tests/fixtures/dycl) on gpuengine and LiteRT.

Per model and per path (IF branch, or WHILE length): the least over --runs invokes (the machine is shared;
the least is the figure load disturbs least) of the end-to-end invoke time
(gpuengine; LiteRT's CPU interpreter on the same inputs), and of what the host-driven op spent
(runtime/control_flow.ControlTiming: decisions, deciding, running the chosen subgraphs); the bytes an IF's
operands cross the host with (read back from the GPU partition before it, uploaded to the branch). Run:
    python scripts/dev/dycl_report.py [--runs 30]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT

from gpuengine import Interpreter

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "dycl"


def _least_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.min(times) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    inputs = np.load(FIXTURES / "inputs.npz")
    cases = {
        "shallow_deep": [[x] for x in inputs["shallow_deep_x"]],
        "skipnet": [[x] for x in inputs["skipnet_x"]],
        "encoder_decoder": [[inputs["encoder_decoder_src"][0], s] for s in inputs["encoder_decoder_steps"]],
    }
    print("| model | path | gpuengine invoke ms | LiteRT CPU invoke ms | host decisions | deciding ms | "
          "chosen subgraphs ms | IF operands through the host |")
    print("|---|---|---|---|---|---|---|---|")
    for name, feeds in cases.items():
        data = (FIXTURES / f"{name}.tflite").read_bytes()
        ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
        ours.allocate_tensors()
        theirs.allocate_tensors()
        (program,) = ours.compiled.control_programs
        graph = ours.compiled.graph
        is_if = program.op.code == "IF"
        operands = [t for t in program.op.inputs[1:] if graph.tensors[t].data is None] if is_if else []
        through = sum(graph.tensors[t].size * graph.tensors[t].dtype.itemsize for t in operands)
        seen: dict[str, list] = {}
        for feed in feeds:
            for it in (ours, theirs):
                for d, v in zip(it.get_input_details(), feed):
                    it.set_tensor(d["index"], v)
            ms = _least_ms(ours.invoke, args.runs)
            rows = []
            for _ in range(args.runs):
                ours.invoke()
                rows.append((program.timing.decisions, program.timing.decide_s * 1e3, program.timing.run_s * 1e3))
            med = np.min(np.array(rows), axis=0)
            lite = _least_ms(theirs.invoke, args.runs)
            path = program.taken if program.op.code == "IF" else f"{program.iterations} iterations"
            seen.setdefault(path, []).append((ms, lite, *med))
        for path, got in seen.items():
            m = np.median(np.array(got), axis=0)  # the median input of the path
            host = f"{through:,} B" if program.op.code == "IF" else "-"
            print(f"| {name} | {path} ({len(got)} inputs) | {m[0]:.3f} | {m[1]:.3f} | {m[2]:g} | {m[3]:.3f} | "
                  f"{m[4]:.3f} | {host} |")


if __name__ == "__main__":
    main()
