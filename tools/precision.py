"""`gpuengine precision`: how far each precision mode is from LiteRT and from the exact result, and its memory.

For every model and precision (fp32, fp16; a quantized model's runs are its int8 runs, quantize-and-dequantize
emulation in f32 or f16), the command runs `--seeds` seeded inputs (gpuengine.oracle.random_inputs) through
gpuengine, LiteRT's CPU kernels and the float64 reference executor (gpuengine/reference.py), and reports:

* err_vs_litert, err_vs_float64: the largest max |Δ| / max(1, max |ref|) over outputs and seeds (integer
  outputs of quantized models are dequantized first); `litert_vs_float64` is LiteRT's own error, the baseline;
* steps_vs_litert (quantized models): the largest difference from LiteRT's integer outputs in quantization steps,
  and the share of elements within 2 steps (the int8 goal);
* argmax_vs_litert, argmax_vs_float64: over classifier outputs (SOFTMAX results), on how many seeds the top
  class agrees;
* memory_bytes: the chosen memory plan's bytes (all GPU programs), and memory_vs_fp32.

Mixed precision (gpuengine/mixed_precision.py): `--search-f32 [TARGET]` searches the tensors an fp16 program keeps
in f32 (with the float64 reference executor; `--save FILE` writes them for `--f32-tensors FILE` and the
Interpreter's `f32_tensors=`), and adds an `fp16-mixed` row measured with them; `--f32-tensors FILE` adds that row
for a set found earlier.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from gpuengine.mixed_precision import SEARCH_TARGET

from .common import add_engine_options, models

QUANTIZED_STEPS = 2  # the int8 goal: within 2 quantization steps of LiteRT's integer kernels
_PASS_THROUGH = ("QUANTIZE", "DEQUANTIZE", "RESHAPE", "SQUEEZE")  # ops a classifier's probabilities may pass


def is_quantized(graph: Any) -> bool:
    """A model whose run-time tensors include int8/uint8 tensors with quantization parameters."""
    return any(t.data is None and t.dtype in (np.int8, np.uint8) and t.quantization is not None
               and t.quantization.scale.size for t in graph.tensors)


def classifier_outputs(graph: Any) -> list[int]:
    """The outputs holding class probabilities: results of SOFTMAX, possibly quantized or reshaped after it."""
    producer = {t: op for op in graph.ops for t in op.outputs}
    result = []
    for t in graph.outputs:
        op = producer.get(t)
        while op is not None and op.code in _PASS_THROUGH:
            op = producer.get(op.inputs[0])
        if op is not None and op.code == "SOFTMAX" and graph.tensors[t].shape[-1] >= 2:
            result.append(t)
    return result


def real(tensor: Any, value: np.ndarray) -> np.ndarray:
    """An output as real numbers (quantized integers dequantized), for comparison with the float64 result."""
    from gpuengine.reference import dequantize, is_real

    return dequantize(tensor, value) if is_real(tensor) else np.asarray(value, np.float64)


def _argmax_agrees(got: dict[int, np.ndarray], ref: dict[int, np.ndarray], outputs: list[int]) -> bool:
    return all(int(np.argmax(got[t])) == int(np.argmax(ref[t])) for t in outputs)


def _precisions(args: argparse.Namespace, mixed: Any) -> list[tuple[str, str, Any]]:
    """(label, precision, f32_tensors) of every run: fp32 and fp16 (or --precision's), and fp16-mixed when a set of
    f32 tensors is given or found (not when the search keeps none)."""
    runs = [(p, p, None) for p in ([args.precision] if args.precision else ["fp32", "fp16"])]
    if mixed:
        runs.append(("fp16-mixed", "fp16", mixed))
    return runs


def _search(data: bytes, args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The f32 tensors of the fp16-mixed row: searched (--search-f32), or read (--f32-tensors)."""
    if args.search_f32 is None:
        return args.f32_tensors, None
    from tqdm import tqdm

    from gpuengine.mixed_precision import search

    found = search(data, target=args.search_f32, progress=lambda xs: tqdm(xs, desc="sensitivity", leave=False))
    if args.save:
        found.save(args.save)
    summary = {"target": found.target, "error_all_f16": found.error_all_f16, "error": found.error,
               "f32_tensors": len(found.f32_tensors), "candidates": found.candidates,
               "f32_elements": found.f32_elements}
    return found.f32_tensors, summary


def measure(data: bytes, args: argparse.Namespace) -> dict[str, Any]:
    """The report of one model (see the module docstring)."""
    from gpuengine import Interpreter
    from gpuengine.model.reader import read_model
    from gpuengine.oracle import random_inputs, relative_error, run_litert
    from gpuengine.reference import run_reference

    graph = read_model(data).main
    quantized = is_quantized(graph)
    classifiers = classifier_outputs(graph)
    seeds = list(range(args.seeds))
    inputs = [random_inputs(data, s) for s in seeds]
    litert: list[dict[int, np.ndarray]] | None = None
    exact: list[dict[int, np.ndarray]] | None = None
    notes: list[str] = []
    try:
        litert = [run_litert(data, f) for f in inputs]
    except Exception as e:  # LiteRT missing, or an op it cannot run: report without it
        notes.append(f"LiteRT: {type(e).__name__}: {e}")
    try:
        exact = [run_reference(data, f) for f in inputs]
    except (NotImplementedError, ValueError) as e:
        notes.append(f"float64 reference: {e}")

    def error(a: list[dict[int, np.ndarray]], b: list[dict[int, np.ndarray]] | None) -> float | None:
        if b is None:
            return None
        return max(relative_error(real(graph.tensors[t], x[t]), real(graph.tensors[t], y[t]))
                   for x, y in zip(a, b) for t in graph.outputs)

    mixed, searched = _search(data, args)
    report: dict[str, Any] = {"quantized": quantized, "seeds": len(seeds), "classifier_outputs": classifiers,
                              "litert_vs_float64": error(litert, exact) if litert is not None else None,
                              "precisions": {}, "notes": notes, "mixed_search": searched}
    if searched and not mixed:
        notes.append(f"mixed precision: no tensor needs f32 (all {searched['candidates']} in f16: "
                     f"{searched['error_all_f16']:.2g} emulated, target {searched['target']:.2g})")
    for name, precision, f32_tensors in _precisions(args, mixed):
        try:
            it = Interpreter(model_content=data, precision=precision, adapter=args.adapter, target=args.target,
                             memory_strategy=args.memory_strategy, optimize=False if args.no_optimize else None,
                             workgroup_cache=args.cache, f32_tensors=f32_tensors)
        except ValueError as e:
            raise SystemExit(f"gpuengine: {e}") from None
        it.allocate_tensors()
        got = []
        for feeds in inputs:
            for t, v in feeds.items():
                it.set_tensor(t, v)
            it.invoke()
            got.append({t: it.get_tensor(t) for t in graph.outputs})
        compiled = it.compiled
        row: dict[str, Any] = {
            "precision_in_effect": compiled.precision,
            "err_vs_litert": error(got, litert), "err_vs_float64": error(got, exact),
            "memory_bytes": sum(p.info.plan.total_bytes for p in compiled.gpu_programs),
            "ops_on_cpu": len(compiled.plan.graph.ops) - compiled.plan.ops_gpu,
        }
        if classifiers:
            row["argmax_vs_litert"] = (sum(_argmax_agrees(g, r, classifiers) for g, r in zip(got, litert))
                                       if litert is not None else None)
            row["argmax_vs_float64"] = (sum(_argmax_agrees(g, r, classifiers) for g, r in zip(got, exact))
                                        if exact is not None else None)
        integer_outputs = [t for t in graph.outputs if np.issubdtype(graph.tensors[t].dtype, np.integer)
                           and graph.tensors[t].quantization is not None]
        if quantized and litert is not None and integer_outputs:
            diffs = np.concatenate([np.abs(g[t].astype(np.int64) - r[t].astype(np.int64)).ravel()
                                    for g, r in zip(got, litert) for t in integer_outputs])
            row["steps_vs_litert"] = {"max": int(diffs.max(initial=0)),
                                      f"within_{QUANTIZED_STEPS}": float(np.mean(diffs <= QUANTIZED_STEPS))}
        if f32_tensors is not None:
            row["f32_tensors"] = compiled.f32_tensors
        label = ("int8/" if quantized else "") + name
        report["precisions"][label] = row
    base = next((r["memory_bytes"] for k, r in report["precisions"].items() if k.endswith("fp32")), None)
    for row in report["precisions"].values():
        row["memory_vs_fp32"] = row["memory_bytes"] / base if base else None
    return report


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if value else "0"
    return str(value)


def format_table(reports: dict[str, dict[str, Any]]) -> str:
    """One row per model and precision."""
    lines = ["| model | precision | err vs LiteRT | err vs float64 | LiteRT vs float64 | argmax (vs LiteRT) "
             "| memory (bytes) | vs fp32 |", "|---|---|---|---|---|---|---|---|"]
    for name, rep in reports.items():
        for label, row in rep["precisions"].items():
            argmax = (f"{_fmt(row['argmax_vs_litert'])}/{rep['seeds']}" if "argmax_vs_litert" in row else "-")
            steps = row.get("steps_vs_litert")
            vs_litert = _fmt(row["err_vs_litert"]) + (
                f" (max {steps['max']} steps, {steps['within_2']:.1%} within 2)" if steps else "")
            lines.append(f"| {name} | {label} | {vs_litert} | {_fmt(row['err_vs_float64'])} "
                         f"| {_fmt(rep['litert_vs_float64'])} | {argmax} | {row['memory_bytes']} "
                         f"| {_fmt(row['memory_vs_fp32'])} |")
        found = rep.get("mixed_search")
        if found and found["f32_tensors"]:
            lines.append(f"  {name}: mixed precision keeps {found['f32_tensors']} of {found['candidates']} stored "
                         f"tensors in f32 ({found['f32_elements']:.0%} of their elements): emulated error "
                         f"{found['error']:.2g} (all f16: {found['error_all_f16']:.2g}, target {found['target']:.2g})")
        lines += [f"  {name}: {note}" for note in rep["notes"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise SystemExit("gpuengine: --seeds must be at least 1")
    if args.precision not in (None, "fp32", "fp16"):
        raise SystemExit(f"gpuengine: --precision must be fp32 or fp16, not {args.precision!r}")
    if args.save and (args.search_f32 is None or len(args.models) != 1):
        raise SystemExit("gpuengine: --save writes a --search-f32 result: give it with --search-f32 and one model")
    reports = {name.split(" ")[0].removesuffix(".tflite"): measure(data, args) for name, data in models(args)}
    print(json.dumps(reports) if args.json else format_table(reports))
    return 0


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("precision", help="accuracy vs LiteRT and vs the float64 reference, and memory, per precision")
    p.add_argument("models", nargs="+", help="models (paths, zoo names or reference model names)")
    p.add_argument("--seeds", type=int, default=5, help="seeded random inputs per model (default 5)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--search-f32", type=float, nargs="?", const=SEARCH_TARGET, default=None, metavar="TARGET",
                   help="search the tensors fp16 keeps in f32 for an emulated error within TARGET (default "
                        f"{SEARCH_TARGET:g}) and add an fp16-mixed row")
    p.add_argument("--save", metavar="FILE", help="with --search-f32 and one model: write the tensors found")
    add_engine_options(p)
    p.set_defaults(func=run)
