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
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

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


def _precisions(args: argparse.Namespace) -> list[str]:
    return [args.precision] if args.precision else ["fp32", "fp16"]


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

    report: dict[str, Any] = {"quantized": quantized, "seeds": len(seeds), "classifier_outputs": classifiers,
                              "litert_vs_float64": error(litert, exact) if litert is not None else None,
                              "precisions": {}, "notes": notes}
    for precision in _precisions(args):
        it = Interpreter(model_content=data, precision=precision, adapter=args.adapter, target=args.target,
                         memory_strategy=args.memory_strategy, optimize=False if args.no_optimize else None,
                         workgroup_cache=args.cache)
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
        label = ("int8/" if quantized else "") + precision
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
        lines += [f"  {name}: {note}" for note in rep["notes"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise SystemExit("gpuengine: --seeds must be at least 1")
    if args.precision not in (None, "fp32", "fp16"):
        raise SystemExit(f"gpuengine: --precision must be fp32 or fp16, not {args.precision!r}")
    reports = {name.split(" ")[0].removesuffix(".tflite"): measure(data, args) for name, data in models(args)}
    print(json.dumps(reports) if args.json else format_table(reports))
    return 0


def add_subcommand(sub: Any) -> None:
    p = sub.add_parser("precision", help="accuracy vs LiteRT and vs the float64 reference, and memory, per precision")
    p.add_argument("models", nargs="+", help="models (paths, zoo names or reference model names)")
    p.add_argument("--seeds", type=int, default=5, help="seeded random inputs per model (default 5)")
    p.add_argument("--json", action="store_true")
    add_engine_options(p)
    p.set_defaults(func=run)
