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

Language models (`--signature decode --steps N`): a prompt (`--prompt` token ids, else seeded random ones filling
half the prefill signature's tokens) goes through the prefill signature, then N decode steps teacher-forced with
the float64 reference's greedy tokens, so every engine is fed the same tokens and keeps its own KV cache. Engines:
the float64 reference (the answer; its composites run through their decompositions), LiteRT with XNNPACK (its
default) and with its builtin kernels alone (BUILTIN_WITHOUT_DEFAULT_DELEGATES), and gpuengine per precision and
hybrid arithmetic (`--hybrid`; both when not given). Per engine: the decode logits' distance from the float64 ones
and from LiteRT's, as max |Δ| / (max - min of the reference's logits) per step, its median and max over the steps,
and on how many steps its argmax is the float64 one.

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
from gpuengine.oracle import litert_interpreter, range_error

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
                             workgroup_cache=args.cache, f32_tensors=f32_tensors, hybrid_arithmetic=args.hybrid)
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


ARITHMETICS = ("integer", "float")


def _prompt(args: argparse.Namespace, length: int, vocab: int) -> list[int]:
    """The prompt's token ids: --prompt (comma separated), else `length` seeded random ids below `vocab`."""
    if args.prompt:
        try:
            ids = [int(x) for x in args.prompt.replace(" ", "").split(",") if x]
        except ValueError:
            raise SystemExit(f"gpuengine: --prompt takes token ids separated by commas, got {args.prompt!r}") from None
        if len(ids) < 1 or any(not 0 <= i < vocab for i in ids):
            raise SystemExit(f"gpuengine: --prompt needs at least one token id, each in 0..{vocab - 1}")
        return ids
    return [int(i) for i in np.random.default_rng(0).integers(0, vocab, length)]


def _decoder_signatures(model: Any, decode_key: str) -> tuple[Any, Any, str]:
    """The decode signature, the prefill signature with the most tokens (None without one), and the name of the
    decode signature's logits output (the one output that is not a KV cache)."""
    sigs = {s.key: s for s in model.signatures}
    if decode_key not in sigs:
        raise SystemExit(f"gpuengine: the model has no signature {decode_key!r} (it has {sorted(sigs)})")
    decode = sigs[decode_key]
    logits = [n for n in decode.outputs if not n.startswith("kv_cache")]
    if len(logits) != 1 or "tokens" not in decode.inputs or "input_pos" not in decode.inputs:
        raise SystemExit(f"gpuengine: signature {decode_key!r} is not a decode step (tokens, input_pos -> logits and "
                         "KV caches)")

    def tokens(s: Any) -> int:
        return int(np.prod(model.subgraphs[s.subgraph].tensors[s.inputs["tokens"]].shape))

    prefills = [s for s in model.signatures if s.key != decode_key and "tokens" in s.inputs
                and "input_pos" in s.inputs]
    return decode, max(prefills, key=tokens, default=None), logits[0]


def _caches(model: Any, sig: Any) -> dict[str, np.ndarray]:
    graph = model.subgraphs[sig.subgraph]
    return {n: np.zeros(graph.tensors[t].shape, graph.tensors[t].dtype) for n, t in sig.inputs.items()
            if n not in ("tokens", "input_pos")}


def _decode_logits(runners: tuple[Any, Any], model: Any, prefill: Any, decode: Any, logits: str, prompt: list[int],
                   forced: list[int] | None, steps: int) -> list[np.ndarray]:
    """The decode logits of `steps` steps after the prompt's prefill: step 0 reads the prompt's last token, step s
    the token forced[s - 1] (None: the engine's own greedy token, for the reference that sets them)."""
    run_prefill, run_decode = runners
    cache = _caches(model, decode)
    start = 0
    if prefill is not None and len(prompt) > 1:
        n = int(np.prod(model.subgraphs[prefill.subgraph].tensors[prefill.inputs["tokens"]].shape))
        head = prompt[:-1][:n]
        ids = np.zeros((1, n), np.int32)
        ids[0, :len(head)] = head
        out = run_prefill(tokens=ids, input_pos=np.arange(n, dtype=np.int32), **cache)
        cache = {k: np.asarray(out[k]) for k in cache}
        start = len(head)
    token, result = prompt[start] if start < len(prompt) else prompt[-1], []
    for s in range(steps):
        out = run_decode(tokens=np.array([[token]], np.int32), input_pos=np.array([start + s], np.int32), **cache)
        cache = {k: np.asarray(out[k]) for k in cache}
        result.append(np.asarray(out[logits], np.float64).reshape(-1))
        token = int(np.argmax(result[-1])) if forced is None else forced[s]
    return result


def _distance(got: list[np.ndarray], ref: list[np.ndarray]) -> list[float]:
    """Per step: max |got - ref| / (max ref - min ref)."""
    return [range_error(g, r) for g, r in zip(got, ref)]


def measure_steps(data: bytes, args: argparse.Namespace) -> dict[str, Any]:
    """The language-model report of one model (see the module docstring)."""
    from gpuengine import Interpreter
    from gpuengine.model.reader import read_model
    from gpuengine.reference import SignatureRunner

    model = read_model(data)
    decode, prefill, logits = _decoder_signatures(model, args.signature)
    vocab = int(model.subgraphs[decode.subgraph].tensors[decode.outputs[logits]].shape[-1])
    prefill_tokens = (int(np.prod(model.subgraphs[prefill.subgraph].tensors[prefill.inputs["tokens"]].shape))
                      if prefill is not None else 0)
    prompt = _prompt(args, prefill_tokens // 2 + 1, vocab)  # a prefill half filled, as prompts are
    steps = args.steps

    def reference(key: str | None) -> Any:
        return SignatureRunner(model, key) if key is not None else None

    try:
        exact = _decode_logits((reference(prefill.key if prefill else None), reference(decode.key)), model,
                               prefill, decode, logits, prompt, None, steps)
    except (ValueError, NotImplementedError) as e:  # e.g. positions past the cache: the prompt and steps too long
        raise SystemExit(f"gpuengine: the float64 reference cannot run the signatures ({e}); positions past the "
                         "model's cache? (a shorter --prompt or fewer --steps)") from None
    forced = [int(np.argmax(x)) for x in exact]
    engines: dict[str, list[np.ndarray]] = {}
    notes: list[str] = []
    try:
        for name, builtin in (("LiteRT (XNNPACK)", False), ("LiteRT (builtin kernels)", True)):
            it = litert_interpreter(data, builtin)
            runners = (it.get_signature_runner(prefill.key) if prefill else None, it.get_signature_runner(decode.key))
            engines[name] = _decode_logits(runners, model, prefill, decode, logits, prompt, forced, steps)
    except ImportError as e:
        notes.append(f"LiteRT: {e}")
    precisions = [args.precision] if args.precision else ["fp32", "fp16"]
    arithmetics = [args.hybrid] if args.hybrid else list(ARITHMETICS)
    for precision in precisions:
        for arithmetic in arithmetics:
            try:
                it = Interpreter(model_content=data, precision=precision, hybrid_arithmetic=arithmetic,
                                 adapter=args.adapter, target=args.target, memory_strategy=args.memory_strategy,
                                 optimize=False if args.no_optimize else None, workgroup_cache=args.cache,
                                 f32_tensors=args.f32_tensors)
            except ValueError as e:
                raise SystemExit(f"gpuengine: {e}") from None
            runners = (it.get_signature_runner(prefill.key) if prefill else None, it.get_signature_runner(decode.key))
            engines[f"gpuengine {precision} {arithmetic}"] = _decode_logits(runners, model, prefill, decode, logits,
                                                                            prompt, forced, steps)
    litert = engines.get("LiteRT (XNNPACK)")
    rows: dict[str, Any] = {}
    for name, got in engines.items():
        vs_exact = _distance(got, exact)
        vs_litert = _distance(got, litert) if litert is not None else None
        rows[name] = {"vs_float64": {"median": float(np.median(vs_exact)), "max": max(vs_exact)},
                      "vs_litert": {"median": float(np.median(vs_litert)), "max": max(vs_litert)}
                      if vs_litert is not None else None,
                      "argmax_as_float64": sum(int(np.argmax(g)) == t for g, t in zip(got, forced)),
                      "per_step_vs_float64": vs_exact}
    return {"signature": decode.key, "prefill": prefill.key if prefill else None, "prompt_tokens": len(prompt),
            "steps": steps, "engines": rows, "notes": notes}


def format_steps_table(reports: dict[str, dict[str, Any]]) -> str:
    """One row per model and engine: decode logits vs the float64 answer and vs LiteRT (XNNPACK)."""
    lines = ["| model | engine | logits vs float64, median / max of range | vs LiteRT (XNNPACK) | argmax = float64 |",
             "|---|---|---|---|---|"]
    for name, rep in reports.items():
        for engine, row in rep["engines"].items():
            exact, litert = row["vs_float64"], row["vs_litert"]
            vs_litert = f"{_fmt(litert['median'])} / {_fmt(litert['max'])}" if litert else "-"
            lines.append(f"| {name} | {engine} | {_fmt(exact['median'])} / {_fmt(exact['max'])} | {vs_litert} "
                         f"| {row['argmax_as_float64']}/{rep['steps']} |")
        lines.append(f"  {name}: prompt of {rep['prompt_tokens']} tokens through {rep['prefill'] or 'decode'}, then "
                     f"{rep['steps']} {rep['signature']} steps fed the float64 answer's greedy tokens")
        lines += [f"  {name}: {note}" for note in rep["notes"]]
    return "\n".join(lines)


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
    if args.signature is not None:
        if args.steps < 1:
            raise SystemExit("gpuengine: --steps must be at least 1")
        if args.hybrid not in (None, *ARITHMETICS):
            raise SystemExit(f"gpuengine: --hybrid must be {' or '.join(ARITHMETICS)}, not {args.hybrid!r}")
        steps = {name.split(" ")[0].removesuffix(".tflite"): measure_steps(data, args) for name, data in models(args)}
        print(json.dumps(steps) if args.json else format_steps_table(steps))
        return 0
    reports = {name.split(" ")[0].removesuffix(".tflite"): measure(data, args) for name, data in models(args)}
    print(json.dumps(reports) if args.json else format_table(reports))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("precision", help="accuracy vs LiteRT and vs the float64 reference, and memory, per precision")
    p.add_argument("models", nargs="+", help="models (paths, zoo names or reference model names)")
    p.add_argument("--seeds", type=int, default=5, help="seeded random inputs per model (default 5)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--search-f32", type=float, nargs="?", const=SEARCH_TARGET, default=None, metavar="TARGET",
                   help="search the tensors fp16 keeps in f32 for an emulated error within TARGET (default "
                        f"{SEARCH_TARGET:g}) and add an fp16-mixed row")
    p.add_argument("--save", metavar="FILE", help="with --search-f32 and one model: write the tensors found")
    p.add_argument("--signature", metavar="KEY", help="a language model's decode signature: measure its logits over "
                                                       "a prefill and --steps decode steps (see --prompt)")
    p.add_argument("--steps", type=int, default=32, help="with --signature: decode steps (default 32)")
    p.add_argument("--prompt", metavar="IDS", help="with --signature: the prompt's token ids, comma separated "
                                                   "(default: seeded random ids filling half the prefill signature)")
    add_engine_options(p)
    p.set_defaults(func=run)
