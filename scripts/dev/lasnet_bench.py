"""Benchmark for docs/design/lasnet.md: a LASNet-style block (tests/fixtures/lasnet, or --model: a larger variant
made by make_lasnet_model.py) dense (gpuengine's own kernels, the model compiled as usual) against spatially sparse
execution at activation rates 0.1-0.9: the block's dispatches per S (runtime/sparse_block.py), the measured choice
(tuning/sparse.py: each S timed with no / every patch active), the latency model's choice (latency/sparse.py) and,
end to end, the engine planned for each rate (Interpreter(sparse_blocks=rate): the latency model's choice inside the
one-submit program) against the dense engine, invoke by invoke. Wall-clock on the adapter gpuengine opens (lavapipe
here: relative signals only). Each figure: the median of --runs, every option once per round (load that comes and
goes hits them alike); the load average is printed.
    python scripts/dev/lasnet_bench.py [--runs 15] [--json OUT] [--model M]
    python scripts/dev/lasnet_bench.py --calibrate   # the sparse kernels' fit (latency/devices.py lavapipe)

--calibrate: the latency model's efficiencies of the templates the dense / sparse choice prices (the general conv
and the two sparse kernels), fitted (tuning/sparse.calibrate) on this adapter's timings of LASNet blocks of three
shapes: their sparse kernels at each S and five activation rates, their dense dispatches as the engine runs them,
from the built-in lavapipe description without its efficiencies.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter as LiteRT

from gpuengine import Interpreter
from gpuengine.latency import devices
from gpuengine.latency.latency import predict_ns
from gpuengine.latency.sparse import choose_execution
from gpuengine.lowering.kernels.dispatch_cost import dispatch_cost
from gpuengine.model.reader import read_model
from gpuengine.passes.lasnet_blocks import find_masked_blocks
from gpuengine.runtime.sparse_block import SparseBlockRunner
from gpuengine.runtime.timing import DispatchTimer
from gpuengine.tuning.sparse import block_input, measure_block, supported_patches

MODEL = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "lasnet" / "lasnet_block.tflite"
PATCHES = (2, 4, 8, 16)  # those the kernels support for the block are run


def cell_rate(block, x: np.ndarray) -> float:
    """The fraction of the block's masker cells active on x (numpy, as the masker computes it)."""
    h, w, c = block.shape
    pooled = x.reshape(h // block.cell, block.cell, w // block.cell, block.cell, c).mean(axis=(1, 3))
    return float((pooled @ block.masker_weights + block.masker_bias > block.threshold).mean())


def calibrate_sparse(runs: int, turns: int) -> None:
    """Print each sample's time, measured and predicted before / after, and the fitted efficiencies (JSON)."""
    import dataclasses

    from gpuengine.tuning import calibrate, sparse

    base = dataclasses.replace(devices.lavapipe(), efficiency={})
    print(f"load average before: {os.getloadavg()}")
    fitted, samples = sparse.calibrate(base, runs=runs, turns=turns)
    print(f"load average after: {os.getloadavg()}")
    for s in samples:
        print(f"{s.group:40s} {s.cost.kernel:15s} measured {s.measured_ns / 1e3:7.0f} us, predicted "
              f"{predict_ns(s.cost, base) / 1e3:7.0f} before, {predict_ns(s.cost, fitted) / 1e3:7.0f} after")
    kept = [s for s in samples if s.cost.kernel in sparse.FITTED_TEMPLATES]
    print(f"median error on the fitted templates' {len(kept)} samples: "
          f"{np.median(calibrate.relative_errors(kept, fitted)):.1%} (before: "
          f"{np.median(calibrate.relative_errors(kept, base)):.1%})")
    print(json.dumps({k: round(v, 3) for k, v in fitted.efficiency.items()}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json")
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--turns", type=int, default=3, help="--calibrate: measuring turns (the least is kept)")
    parser.add_argument("--model", default=str(MODEL), help="a LASNet-style block (make_lasnet_model.py --size)")
    args = parser.parse_args()
    if args.calibrate:
        calibrate_sparse(args.runs, args.turns)
        return
    data = Path(args.model).read_bytes()
    (block,) = find_masked_blocks(read_model(data).subgraphs[0])
    patches = supported_patches(block, PATCHES)
    dense = Interpreter(model_content=data)
    dense.allocate_tensors()
    (program,) = dense.compiled.gpu_programs
    timer = DispatchTimer(program)
    block_dispatches = [d for d, spec in zip(program.hot_dispatches, program.dispatches)
                        if spec.spec.shader not in ("bhwc_to_phwc4", "phwc4_to_bhwc")]
    gpu = program.gpu
    runners = {p: SparseBlockRunner(gpu, block, p) for p in patches}
    lite = LiteRT(model_content=data)
    lite.allocate_tensors()
    model = devices.for_target(dense.compiled.target.name if dense.compiled.target else "cpu")
    block_specs = [d.spec for d in program.dispatches if d.spec.shader not in ("bhwc_to_phwc4", "phwc4_to_bhwc")]
    dense_ns = sum(predict_ns(dispatch_cost(spec, program.graph, program.precision), model) for spec in block_specs)
    h, w, c = block.shape
    # the measured chooser (tuning/sparse.py): dense timed as below, each S with no / every patch active
    tuned = measure_block(gpu, block, lambda: timer.span(runs=1, dispatches=block_dispatches, warmup_s=0) / 1e6,
                          patches, runs=args.runs)
    dense_ms = tuned.dense_ms
    print(f"load average before: {os.getloadavg()}")
    print(f"tuned: dense {dense_ms:.2f} ms; per S (none / all active): "
          + ", ".join(f"S={p} {tuned.none_ms[p]:.2f} / {tuned.all_ms[p]:.2f}" for p in patches), flush=True)
    rows = []
    for rate in (0.1, 0.2, 0.3, 0.5, 0.7, 0.9):
        x = block_input(block, rate, 0)
        cells = cell_rate(block, x[0])
        lite.set_tensor(lite.get_input_details()[0]["index"], x)
        lite.invoke()
        want = lite.get_tensor(lite.get_output_details()[0]["index"])
        dense.set_tensor(dense.get_input_details()[0]["index"], x)
        dense.invoke()
        errors = {"dense": float(np.abs(dense.get_tensor(dense.get_output_details()[0]["index"]) - want).max())}
        for p, r in runners.items():
            errors[f"sparse {p}"] = float(np.abs(r.run(x) - want).max())
        # end to end: the engine planned for this rate (the latency model's choice of S or dense, inside the one
        # program), invoked as a user does, against the dense engine
        engine = Interpreter(model_content=data, sparse_blocks=float(cells))
        engine.allocate_tensors()
        engine.set_tensor(engine.get_input_details()[0]["index"], x)
        engine.invoke()
        errors["engine"] = float(np.abs(engine.get_tensor(engine.get_output_details()[0]["index"]) - want).max())
        engine_choice = next((f"sparse {m.patch}" for m in engine.compiled.plan.sparse.values()), "dense")
        times: dict[str, list[float]] = {"dense block": [], "dense program": [], "engine invoke": [],
                                         "dense invoke": []}
        for _ in range(args.runs):  # every option once per round: load that comes and goes hits them alike
            times["dense block"].append(timer.span(runs=1, dispatches=block_dispatches, warmup_s=0) / 1e6)
            times["dense program"].append(timer.span(runs=1, warmup_s=0) / 1e6)
            for p, r in runners.items():
                times.setdefault(f"sparse {p}", []).append(r.time_ms(runs=1))
            for key, it in (("engine invoke", engine), ("dense invoke", dense)):
                start = time.perf_counter()
                it.invoke()
                times[key].append((time.perf_counter() - start) * 1e3)
        best = {k: float(np.median(v)) for k, v in times.items()}
        mode, size, predicted = choose_execution(model, h, w, c, block.cell, float(cells), dense_ns, patches)
        predicted_choice = "dense" if mode == "dense" else f"sparse {size}"
        mode, size, estimated = tuned.choose(float(cells))
        chosen = best["dense block"] if mode == "dense" else best[f"sparse {size}"]
        fastest_sparse = min((best[f"sparse {p}"], p) for p in patches)
        rows.append({"rate": float(cells), "active": {p: runners[p].active for p in patches},
                     "patches": {p: runners[p].patches_total for p in patches}, "ms": best,
                     "choice": f"{mode} {size}" if mode == "sparse" else "dense", "chosen_ms": chosen,
                     "chosen_vs_dense": chosen / best["dense block"], "fastest_sparse": fastest_sparse,
                     "max_abs_error": errors, "predicted_us": {k: v / 1e3 for k, v in predicted.items()},
                     "predicted_choice": predicted_choice, "tuned_estimate_ms": estimated,
                     "predicted_choice_vs_dense": (best["dense block"] if predicted_choice == "dense" else
                                                   best[predicted_choice]) / best["dense block"],
                     "engine_choice": engine_choice,
                     "engine_vs_dense": best["engine invoke"] / best["dense invoke"]})
        print(f"rate {cells:.2f}: dense block {best['dense block']:.2f} ms (program {best['dense program']:.2f}); "
              + ", ".join(f"S={p} {best[f'sparse {p}']:.2f} ms ({runners[p].active}/{runners[p].patches_total})"
                          for p in patches)
              + f"; tuned choice {rows[-1]['choice']} -> {chosen:.2f} ms = {chosen / best['dense block']:.2f}x dense "
              f"(latency model: {predicted_choice} = {rows[-1]['predicted_choice_vs_dense']:.2f}x); engine invoke "
              f"({engine_choice}) {best['engine invoke']:.2f} ms vs dense {best['dense invoke']:.2f} ms = "
              f"{rows[-1]['engine_vs_dense']:.2f}x; max |error| {max(errors.values()):.1e}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"adapter": gpu.name, "model": model.source, "rows": rows,
                                               "load_average": os.getloadavg(),
                                               "date": time.strftime("%Y-%m-%d")}, indent=1))


if __name__ == "__main__":
    main()
