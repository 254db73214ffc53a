"""What every `gpuengine` subcommand shares: finding a model, the engine options, seeded inputs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np


def looks_like_path(spec: str) -> bool:
    """A model argument meant as a file (a suffix or a folder in it), not a zoo or reference-model name."""
    return "/" in spec or os.sep in spec or bool(Path(spec).suffix)


def load_model(spec: str | None) -> tuple[str, bytes]:
    """A model by path, by zoo name (tiny, mobilenet_v1, ...) or by reference-model name (selfie_segmentation)."""
    from gpuengine import zoo

    from . import fetch

    if spec is None:
        spec = zoo.DEFAULT
    path = Path(spec)
    if path.is_file():
        try:
            return path.name, path.read_bytes()
        except OSError as e:
            raise SystemExit(f"gpuengine: cannot read {spec}: {e.strerror}") from None
    if spec in zoo.MODELS:
        return f"{spec} (zoo)", zoo.get(spec)
    if path.is_dir():
        raise SystemExit(f"gpuengine: {spec} is a folder, not a model file")
    if looks_like_path(spec):
        raise SystemExit(f"gpuengine: no such file: {spec}")
    if not fetch.cached_models():
        print(f"gpuengine: {spec!r} is no model file or zoo model; fetching the reference models "
              f"({fetch.MEDIAPIPE}) into {fetch.cache_dir()} to look for it", file=sys.stderr, flush=True)
    try:
        p = fetch.model_path(spec)
    except KeyError:
        raise SystemExit(f"gpuengine: no model file, zoo model or reference model named {spec!r}; zoo models: "
                         f"{', '.join(zoo.MODELS)}; reference models: {', '.join(fetch.cached_models())}") from None
    except fetch.ModelsUnavailable as e:  # a failed download, not a mistake: exit 1
        print(f"gpuengine: {spec!r} is no model file or zoo model ({', '.join(zoo.MODELS)}), and the reference "
              f"models are unavailable: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    return p.name, p.read_bytes()


def models(args: argparse.Namespace) -> list[tuple[str, bytes]]:
    """The models a command names (`models`, one or several; default: the zoo's default model)."""
    specs = args.models if isinstance(args.models, list) else [args.models]
    return [load_model(m) for m in (specs or [None])]


def interpreter(data: bytes, args: argparse.Namespace, cache: str | None = None, max_inflight: int = 2) -> Any:
    """An allocated Interpreter with the command's engine options (tuning cache: `cache`, else --cache)."""
    from gpuengine import Interpreter
    from gpuengine.errors import GpuEngineError

    try:
        it = Interpreter(model_content=data, adapter=args.adapter, memory_strategy=args.memory_strategy,
                         optimize=False if args.no_optimize else None, target=args.target, precision=args.precision,
                         workgroup_cache=cache or getattr(args, "cache", None), max_inflight=max_inflight,
                         f32_tensors=getattr(args, "f32_tensors", None),
                         hybrid_arithmetic=getattr(args, "hybrid", None),
                         device_profile=getattr(args, "device_profile", None),
                         sparse_blocks=getattr(args, "sparse_blocks", None), webgpu=getattr(args, "webgpu", None))
    except GpuEngineError:  # a bad model file or adapter: cli.main says so (exit 2)
        raise
    except ValueError as e:  # a bad option value: say so, as argparse would
        raise SystemExit(f"gpuengine: {e}") from None
    it.allocate_tensors()
    return it


def read_input(item: str) -> tuple[str, np.ndarray]:
    """An `--input NAME=FILE.npy` argument -> (NAME, the array), or a one-line error."""
    name, _, file = item.partition("=")
    if not name or not file:
        raise SystemExit(f"gpuengine: --input takes NAME=FILE.npy, got {item!r}")
    try:
        with open(file, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                raise SystemExit(f"gpuengine: --input {name}: {file} is not a .npy file")
            f.seek(0)
            return name, np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise SystemExit(f"gpuengine: --input {name}: no such file: {file}") from None
    except IsADirectoryError:
        raise SystemExit(f"gpuengine: --input {name}: {file} is a folder, not a .npy file") from None
    except (OSError, ValueError, EOFError) as e:
        raise SystemExit(f"gpuengine: --input {name}: {file} is not a readable .npy array ({e})") from None


def fitted(name: str, value: np.ndarray, shape: Any, dtype: Any, taker: str = "the model's input") -> np.ndarray:
    """An --input array as the input takes it, or a one-line error naming what does not fit."""
    shape = tuple(int(n) for n in shape)
    if value.shape != shape:
        raise SystemExit(f"gpuengine: --input {name}: the file holds shape {value.shape}, {taker} takes {shape}")
    if not np.can_cast(value.dtype, dtype, "same_kind"):
        raise SystemExit(f"gpuengine: --input {name}: the file holds {value.dtype}, {taker} takes "
                         f"{np.dtype(dtype)}")
    return value.astype(dtype)


def feeds(it: Any, inputs: list[str] | dict[str, np.ndarray], seed: int) -> dict[int, np.ndarray]:
    """Inputs from `name=file.npy` arguments (or arrays by name), seeded random values for the others."""
    given = dict(inputs) if isinstance(inputs, dict) else dict(read_input(item) for item in inputs)
    from gpuengine.oracle import integer_input_bounds

    rng = np.random.default_rng(seed)
    id_bound = integer_input_bounds(it.compiled.source) if hasattr(it, "compiled") else {}
    result = {}
    names = [d["name"] for d in it.get_input_details()]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SystemExit(f"gpuengine: unknown input(s) {unknown}; the model's inputs are {names}")
    for d in it.get_input_details():
        if d["name"] in given:
            result[d["index"]] = fitted(d["name"], given[d["name"]], d["shape"], d["dtype"])
        elif np.issubdtype(d["dtype"], np.floating):
            result[d["index"]] = rng.uniform(-1, 1, d["shape"]).astype(d["dtype"])
        else:
            result[d["index"]] = rng.integers(0, id_bound.get(d["index"], 4), d["shape"]).astype(d["dtype"])
    return result


def signature_feeds(runner: Any, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs of a signature by name: positions 0, 1, ... for `input_pos`, integers 0..3 for the others
    (valid token ids), small floats (a KV cache)."""
    rng = np.random.default_rng(seed)
    result = {}
    for name, d in runner.get_input_details().items():
        if np.issubdtype(d["dtype"], np.floating):
            result[name] = (rng.uniform(-1, 1, d["shape"]) * 0.5).astype(d["dtype"])
        elif name == "input_pos" and len(d["shape"]) == 1:
            result[name] = np.arange(d["shape"][0]).astype(d["dtype"])
        else:
            result[name] = rng.integers(0, 4, d["shape"]).astype(d["dtype"])
    return result


def primed(data: bytes, args: argparse.Namespace, cache: str | None = None) -> Any:
    """An interpreter that has run once on seeded values for every input (its buffers hold real data)."""
    it = interpreter(data, args, cache)
    for t, v in feeds(it, [], seed=0).items():
        it.set_tensor(t, v)
    it.invoke()
    return it


def gpu_span_ms(it: Any, runs: int = 20, warmup_s: float | None = None) -> float:
    """GPU milliseconds of one invoke, the way `bench` reports it: the span of each GPU program's pass after a
    warm-up (runtime/timing.py), summed over the model's GPU programs."""
    from gpuengine.runtime.timing import WARMUP_S, DispatchTimer

    warm = WARMUP_S if warmup_s is None else warmup_s
    return sum(DispatchTimer(p).span(runs=runs, warmup_s=warm) for p in it.compiled.gpu_programs) / 1e6


def at_least(low: int) -> Any:
    """An argparse type: an integer >= low (argparse then says `invalid ... value` in one line, exit 2)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(text)
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adapter", default=None, help="auto (default), hardware, software, or part of an adapter name")
    p.add_argument("--webgpu", default=None, metavar="IMPLEMENTATION",
                   help="wgpu (default; env GPUENGINE_WEBGPU): wgpu-native; or dawn: Dawn, through wgpudawn "
                        "(pip install 'gpuengine[dawn]'); with no GPU, Dawn compiles only (inspect, --dump-wgsl)")
    p.add_argument("--target", default=None,
                   help="adapter class to decompose kernels for: auto (default: detected; env GPUENGINE_TARGET), "
                        "discrete, integrated or cpu")
    p.add_argument("--device-profile", default=None, metavar="PROFILE",
                   help="full (default; env GPUENGINE_DEVICE): the adapter's features and limits; or baseline: no "
                        "optional feature and WebGPU's default limits, as many integrated and mobile GPUs offer")
    p.add_argument("--precision", default=None,
                   help="fp32 (default; env GPUENGINE_PRECISION) or fp16: tensors and weights stored as f16, "
                        "products in f16, sums in f32 (needs the adapter's shader-f16)")
    p.add_argument("--f32-tensors", default=None, metavar="FILE",
                   help="fp16 only: keep these tensors in f32 (mixed precision; a JSON list of tensor names, or "
                        "what `gpuengine precision --search-f32 --save FILE` wrote)")
    p.add_argument("--hybrid", default=None, metavar="ARITHMETIC",
                   help="hybrid int8 FULLY_CONNECTED (float activations, int8 weights): integer (default, but float "
                        "for generate and bench --llm; env GPUENGINE_HYBRID), rows quantized as LiteRT does, i32 "
                        "sums: LiteRT's Interpreter's numbers; or float: weights dequantized in registers, f32 sums: "
                        "LiteRT-LM's arithmetic, the float64 answer up to f32 rounding")
    p.add_argument("--memory-strategy", default="best",
                   help="naive, greedy (the paper's), greedy_in_order, greedy_by_breadth, "
                        "greedy_by_size_dist_priority, greedy_best (TFLite's), mincostflow, greedy_by_size, offsets "
                        "or best (default)")
    p.add_argument("--no-optimize", action="store_true", help="turn graph transformations and fusion off")
    p.add_argument("--sparse-blocks", type=float, default=None, metavar="RATE",
                   help="run LASNet-style masked blocks spatially sparse where the latency model predicts it faster "
                        "at this expected activation rate (0-1); default: dense")
    p.add_argument("--cache", help="tuning cache to read (tune: and write); default $GPUENGINE_TUNE_CACHE or "
                                   "~/.cache/gpuengine/tuning.json")


def predicted_vs_measured(measured_us: list[float], predicted_us: list[float], path: str, xlabel: str, ylabel: str,
                          title: str) -> None:
    """The latency model's check as a picture: one point a dispatch on log axes, the diagonal dashed (matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("gpuengine: --plot needs matplotlib (pip install gpuengine[plot])") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.loglog(measured_us, predicted_us, "o", alpha=0.6)
    lo, hi = min(measured_us + predicted_us), max(measured_us + predicted_us)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\none point a dispatch", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
