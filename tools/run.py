"""`gpuengine run MODEL`: run a model once (seeded random inputs unless given) and check it against LiteRT.

A model with several signatures (a decoder's prefill and decode) runs each of them, or the one --signature names.
The yardstick, said in the output:
- float models: LiteRT's CPU interpreter, max |ours - LiteRT| / max(1, max |LiteRT|) per output within --tolerance
  (1e-4);
- integer-quantized models: the same against LiteRT's builtin integer kernels, whose rounding every int8 op of
  gpuengine reproduces (tests/models/test_quantized_and_landmark_models.py; XNNPACK rounds some int8 ops otherwise);
- hybrid int8 models (FULLY_CONNECTED with float inputs and int8 weights): LiteRT's builtin kernels, the difference
  relative to the range of LiteRT's output within 5e-2, as the decoder tests hold them
  (tests/models/test_litert_torch_decoders.py): the builtin kernels quantize each activation row symmetrically,
  gpuengine as LiteRT's default XNNPACK delegate does (asymmetrically, or not at all with --hybrid float), so their
  outputs differ by about 1e-2 of the range, and XNNPACK itself departs from the float64 answer on some decoders.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .common import add_engine_options, at_least, feeds, fitted, interpreter, load_model, read_input, signature_feeds

HYBRID_TOLERANCE = 5e-2  # max |ours - LiteRT builtin| / range(LiteRT's output), tests/models/test_litert_torch_decoders


@dataclass
class Yardstick:
    """What outputs are compared with, how, and how far they may differ."""

    builtin: bool  # LiteRT's builtin kernels (else its default interpreter, XNNPACK)
    range_relative: bool  # max |diff| / range(ref) (else / max(1, max |ref|))
    tolerance: float

    def describe(self) -> str:
        if self.builtin and not self.range_relative:
            return (f"integer-quantized model: LiteRT's builtin integer kernels (whose rounding gpuengine reproduces; "
                    f"XNNPACK rounds some int8 ops otherwise), max |diff| / max(1, max |LiteRT|) <= {self.tolerance:g}")
        if not self.range_relative:
            return f"LiteRT (CPU), max |diff| / max(1, max |LiteRT|) <= {self.tolerance:g}"
        return (f"hybrid int8 model (FULLY_CONNECTED with float inputs, int8 weights): LiteRT's builtin kernels, "
                f"max |diff| / range of LiteRT's output <= {self.tolerance:g}")

    def error(self, got: np.ndarray, ref: np.ndarray) -> float:
        from gpuengine.oracle import range_error, relative_error

        ref = np.asarray(ref, np.float64)
        if (self.range_relative and np.asarray(got).shape == ref.shape and np.all(np.isfinite(ref))
                and ref.size and np.ptp(ref) > 0):
            return range_error(got, ref)
        return relative_error(got, ref)  # (a constant or non-finite output has no range to measure against)


def is_hybrid_model(model: Any) -> bool:
    """Whether any subgraph holds a hybrid FULLY_CONNECTED (float activations, int8 weights)."""
    from gpuengine.model.quantization import is_hybrid

    return any(op.code == "FULLY_CONNECTED" and len(op.inputs) >= 2 and op.inputs[1] >= 0 and is_hybrid(op, g)
               for g in model.subgraphs for op in g.ops)


def is_quantized_model(model: Any) -> bool:
    """Whether some op computes on integer-quantized activations (an int8 / uint8 / int16 output with a scale)."""
    return any(g.tensors[t].quantization is not None and np.issubdtype(g.tensors[t].dtype, np.integer)
               for g in model.subgraphs for op in g.ops for t in op.outputs if t >= 0)


def timed(call: Any, runs: int) -> list[float]:
    call()  # warm-up (and, for a signature, its compile)
    times = []
    for _ in range(max(1, runs)):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def save(folder: str | None, name: str, out: np.ndarray) -> None:
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        np.save(Path(folder) / f"{safe}.npy", out)


def compared(name: str, out: np.ndarray, ref: np.ndarray | None, yardstick: Yardstick) -> tuple[str, float]:
    line = f"output {name}: shape {tuple(out.shape)} {out.dtype}"
    if ref is None:
        return line, 0.0
    err = yardstick.error(out, ref)
    diff = np.max(np.abs(out.astype(np.float64) - ref), initial=0) if out.shape == ref.shape else float("inf")
    kind = "range-relative" if yardstick.range_relative else "relative"
    return line + f", max |diff| vs LiteRT {diff:.3g} ({kind} {err:.3g})", err


def cmd_run(args: argparse.Namespace) -> int:
    name, data = load_model(args.model)
    given = dict(read_input(item) for item in args.input)  # checked before anything compiles
    if args.output_dir:
        try:
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SystemExit(f"gpuengine: --output-dir {args.output_dir}: {e.strerror}") from None
    from gpuengine.model.reader import read_model

    model = read_model(data)
    keys = [s.key for s in model.signatures]
    if args.signature is not None and args.signature not in keys:
        raise SystemExit(f"gpuengine: --signature {args.signature!r}: the model's signatures are {keys or 'none'}")
    hybrid = is_hybrid_model(model)
    yardstick = Yardstick(builtin=hybrid or is_quantized_model(model), range_relative=hybrid,
                          tolerance=args.tolerance if args.tolerance is not None
                          else HYBRID_TOLERANCE if hybrid else 1e-4)
    t0 = time.perf_counter()
    it = interpreter(data, args)
    compile_ms = (time.perf_counter() - t0) * 1e3
    if args.signature is not None or len(keys) > 1:
        return run_signatures(args, name, data, it, [args.signature] if args.signature else keys, given, yardstick)
    inputs = feeds(it, given, args.seed)
    for t, v in inputs.items():
        it.set_tensor(t, v)
    times = timed(it.invoke, args.runs)
    outputs = {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    compiled = it.compiled
    print(f"model: {name}")
    print(f"adapter: {compiled.gpu.name if compiled.gpu else 'none'}"
          + (f" (target {compiled.target.describe()})" if compiled.target else ""))
    print(f"ops on GPU: {compiled.plan.ops_gpu}/{len(compiled.plan.graph.ops)}, partitions: "
          f"{len(compiled.plan.partitions)}, dispatches: {compiled.dispatches}, compile: {compile_ms:.0f} ms")
    print(f"invoke: median {np.median(times):.2f} ms over {len(times)} runs")
    ref = litert_outputs(data, inputs, yardstick)
    if ref is not None:
        print(f"compared with: {yardstick.describe()}")
    worst = 0.0
    for d in it.get_output_details():
        line, err = compared(d["name"], outputs[d["index"]], None if ref is None else ref[d["index"]], yardstick)
        worst = max(worst, err)
        print(line)
        save(args.output_dir, d["name"], outputs[d["index"]])
    return verdict(ref is not None, worst, yardstick)


def litert_outputs(data: bytes, inputs: dict[int, np.ndarray], yardstick: Yardstick) -> dict[int, np.ndarray] | None:
    from gpuengine.oracle import run_litert

    try:
        return run_litert(data, inputs, builtin=yardstick.builtin)
    except ImportError:
        print("LiteRT not installed: no comparison (pip install 'gpuengine[litert]')")
        return None


def verdict(compared_any: bool, worst: float, yardstick: Yardstick, what: str = "outputs") -> int:
    if compared_any and worst > yardstick.tolerance:
        print(f"FAIL: {what} differ from LiteRT by {worst:.3g} > {yardstick.tolerance:g}", file=sys.stderr)
        return 1
    return 0


def run_signatures(args: argparse.Namespace, name: str, data: bytes, it: Any, keys: list[str],
                   given: dict[str, np.ndarray], yardstick: Yardstick) -> int:
    """Each signature in `keys`: seeded inputs (token ids 0..3, positions from 0, small floats) unless --input gives
    them (one signature only: --signature KEY), its outputs compared with LiteRT's signature runner."""
    if given and len(keys) > 1:
        raise SystemExit(f"gpuengine: --input: the model has several signatures ({', '.join(keys)}); name the one "
                         "the inputs are for with --signature KEY")
    runners = {key: it.get_signature_runner(key) for key in keys}
    feeds = {key: signature_feeds(runner, args.seed) for key, runner in runners.items()}
    for key, runner in runners.items():  # the given inputs checked before anything runs
        details = runner.get_input_details()
        unknown = sorted(set(given) - set(details))
        if unknown:
            raise SystemExit(f"gpuengine: unknown input(s) {unknown}; signature {key!r} takes {sorted(details)}")
        feeds[key].update({n: fitted(n, v, details[n]["shape"], details[n]["dtype"], f"signature {key!r}")
                           for n, v in given.items()})
    try:
        from gpuengine.oracle import litert_interpreter

        oracle = litert_interpreter(data, builtin=yardstick.builtin)
    except ImportError:
        oracle = None
        print("LiteRT not installed: no comparison (pip install 'gpuengine[litert]')")
    print(f"model: {name}")
    gpu = it.compiled.gpu
    print(f"adapter: {gpu.name if gpu else 'none'}")
    print(f"signatures run: {', '.join(keys)}" + ("" if args.signature else " (all; --signature KEY runs one)"))
    if oracle is not None:
        print(f"compared with: {yardstick.describe()}")
    worst = 0.0
    for key, runner in runners.items():
        inputs = feeds[key]
        t0 = time.perf_counter()
        outputs = runner(**inputs)  # compiles the signature's graph
        compile_ms = (time.perf_counter() - t0) * 1e3
        times = timed(lambda runner=runner, inputs=inputs: runner(**inputs), args.runs)
        compiled = runner.compiled
        print(f"signature {key}: ops on GPU {compiled.plan.ops_gpu}/{len(compiled.plan.graph.ops)}, partitions "
              f"{len(compiled.plan.partitions)}, dispatches {compiled.dispatches}, first call {compile_ms:.0f} ms, "
              f"median {np.median(times):.2f} ms over {len(times)} runs")
        ref = oracle.get_signature_runner(key)(**inputs) if oracle is not None else None
        for n, out in outputs.items():
            line, err = compared(n, out, None if ref is None else ref[n], yardstick)
            worst = max(worst, err)
            print("  " + line)
            save(args.output_dir, f"{key}.{n}" if len(keys) > 1 else n, out)
    return verdict(oracle is not None, worst, yardstick, what="outputs of " + ", ".join(keys))


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run a model once (random seeded inputs unless given) and check it vs LiteRT")
    run.add_argument("model", nargs="?",
                     help="a .tflite path, a zoo name or a reference model name (default: the zoo's mobilenet_v2)")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="the value of input NAME, from a .npy file of its shape (repeatable; the other inputs get "
                          "seeded random values)")
    run.add_argument("--output-dir", metavar="DIR",
                     help="save every output to DIR/NAME.npy (several signatures run: DIR/SIGNATURE.NAME.npy)")
    run.add_argument("--signature", metavar="KEY",
                     help="run only this signature (default: every signature of a model with several)")
    run.add_argument("--runs", type=at_least(1), default=10, help="timed invokes after a warm-up (default 10)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    run.add_argument("--tolerance", type=float, default=None,
                     help="max difference to LiteRT (default 1e-4 relative to max(1, max |LiteRT|); hybrid int8 "
                          "models: 5e-2 relative to the range of LiteRT's builtin kernels' output)")
    add_engine_options(run)
    run.set_defaults(func=cmd_run)
