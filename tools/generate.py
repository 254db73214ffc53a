"""`gpuengine generate MODEL --prompt ...` (text alone on stdout, timings on stderr) and `gpuengine bench MODEL
--llm` (time to first token, prefill and decode tokens/s, GPU memory; beside LiteRT's Interpreter on the CPU
driving the same signatures and LiteRT-LM's own Benchmark when litert-lm-api is installed)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from .common import add_engine_options


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"adapter": args.adapter, "precision": args.precision, "memory_strategy": args.memory_strategy,
            "optimize": False if args.no_optimize else None, "target": args.target,
            "workgroup_cache": getattr(args, "cache", None), "f32_tensors": getattr(args, "f32_tensors", None),
            "hybrid_arithmetic": getattr(args, "hybrid", None)}


def open_engine(args: argparse.Namespace, loop: str = "auto") -> Any:
    from gpuengine.llm import Engine

    try:
        return Engine(args.model, getattr(args, "tokenizer", None), loop=loop, progress=True,
                      steps_ahead=getattr(args, "steps_ahead", 4), **engine_options(args))
    except (ValueError, FileNotFoundError, ImportError) as e:
        raise SystemExit(f"gpuengine: {e}") from None


def sampler(args: argparse.Namespace, engine: Any) -> Any:
    from gpuengine.llm import SamplerConfig

    base = engine.default_sampler
    try:
        return SamplerConfig(top_k=args.top_k if args.top_k is not None else base.top_k,
                             top_p=args.top_p if args.top_p is not None else base.top_p,
                             temperature=args.temperature if args.temperature is not None else base.temperature,
                             seed=args.seed if args.seed is not None else base.seed)
    except ValueError as e:
        raise SystemExit(f"gpuengine: {e}") from None


def cmd_generate(args: argparse.Namespace) -> int:
    engine = open_engine(args, args.loop)
    session = engine.create_session(apply_prompt_template=not args.no_template, sampler_config=sampler(args, engine))
    try:
        for piece in session.generate_stream(args.prompt, args.max_tokens):
            sys.stdout.write(piece)
            sys.stdout.flush()
    except ValueError as e:
        raise SystemExit(f"gpuengine: {e}") from None
    sys.stdout.write("\n")
    t, s = engine.timing, engine.stats
    decode_rate = t.decode_tokens / t.decode_s if t.decode_s > 0 else float("nan")
    print(f"[{engine.loop if session.loop == engine.loop else session.loop} loop on "
          f"{engine.decode.compiled.gpu.name}] prompt {t.prefill_tokens} tokens, first token after "
          f"{t.ttft_s * 1e3:.0f} ms; {t.decode_tokens + 1} tokens, decode {decode_rate:.1f} tokens/s; "
          f"{s.reads} reads of {s.bytes_read} bytes, up to {s.max_in_flight} steps in flight; "
          f"compile {engine.compile_s:.1f} s", file=sys.stderr)
    return 0


def rates(timing: Any) -> dict[str, float]:
    return {"ttft_ms": timing.ttft_s * 1e3, "prefill_tokens": timing.prefill_tokens,
            "prefill_tokens_per_s": timing.prefill_tokens / timing.prefill_s if timing.prefill_s > 0 else None,
            "decode_tokens": timing.decode_tokens,
            "decode_tokens_per_s": timing.decode_tokens / timing.decode_s if timing.decode_s > 0 else None}


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's best over the repeats (the lowest TTFT, the highest rates)."""
    best = dict(runs[0])
    for r in runs[1:]:
        best["ttft_ms"] = min(best["ttft_ms"], r["ttft_ms"])
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
            if r[key] is not None:
                best[key] = max(best[key] or 0.0, r[key])
    return best


LITERT_LM_BENCH = """
import json, sys
import litert_lm
backend = litert_lm.Backend.GPU() if sys.argv[2] == "gpu" else litert_lm.Backend.CPU()
b = litert_lm.Benchmark(model_path=sys.argv[1], backend=backend, prefill_tokens=int(sys.argv[3]),
                        decode_tokens=int(sys.argv[4]))
info = b.run()
print(json.dumps({"ttft_ms": info.time_to_first_token_in_second * 1e3,
                  "prefill_tokens": info.last_prefill_token_count,
                  "prefill_tokens_per_s": info.last_prefill_tokens_per_second,
                  "decode_tokens": info.last_decode_token_count,
                  "decode_tokens_per_s": info.last_decode_tokens_per_second}))
"""


def litert_lm_benchmark(path: str, backend: str, prefill: int, decode: int, timeout: float = 300) -> dict[str, Any]:
    """LiteRT-LM's own Benchmark, in a child process (a native abort or hang must not take the bench down)."""
    try:
        import litert_lm  # noqa: F401
    except ImportError:
        return {"error": "litert-lm-api is not installed"}
    try:
        done = subprocess.run([sys.executable, "-c", LITERT_LM_BENCH, path, backend, str(prefill), str(decode)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result in {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    if result and result["decode_tokens"]:
        return result
    # LiteRT-LM logs its reason (an "E..." line) and may still return a benchmark of zeros
    errors = [ln.split("] ", 1)[-1].strip() for ln in done.stderr.splitlines()
              if ln.startswith("E0") or ln.startswith("RuntimeError")]
    return {"error": (errors[0] if errors else f"no figures (exit status {done.returncode})")[:300]}


def run_bench(args: argparse.Namespace) -> int:
    """bench MODEL --llm."""
    from gpuengine.llm.reference import LiteRTDecoder

    args.model = args.models
    if args.model is None:
        raise SystemExit("gpuengine bench --llm: give a .litertlm / .task bundle or a .tflite with --tokenizer")
    engine = open_engine(args)
    prompt = [t % engine.vocab for t in range(3, 3 + args.prompt_tokens)]
    prompt = [*engine.bundle.start_ids, *prompt][:args.prompt_tokens]
    if args.prompt_tokens + args.decode_tokens > engine.cache_length:
        raise SystemExit(f"gpuengine: {args.prompt_tokens} + {args.decode_tokens} tokens exceed the KV cache of "
                         f"{engine.cache_length}")
    report: dict[str, Any] = {"model": os.path.basename(args.model), "adapter": engine.decode.compiled.gpu.name,
                              "cache_length": engine.cache_length, "vocab": engine.vocab,
                              "prefill_signatures": sorted(engine.prefills), "compile_s": engine.compile_s,
                              "gpu_memory_bytes": engine.gpu_memory_bytes(), "runs": {}}
    repeats = max(1, min(args.runs, 5))  # best of (--runs, at most 5) generations
    report["repeats"] = repeats
    loops = ["gpu", "host"] if engine.gpu_loop_reason is None else ["host"]
    if engine.gpu_loop_reason is not None:
        report["gpu_loop_unavailable"] = engine.gpu_loop_reason
    for loop in loops:
        warm = engine.create_session(apply_prompt_template=False, loop=loop)
        list(warm.generate_tokens(list(prompt[:2]), 2))  # compiles the sampler kernel outside the timings
    runs: dict[str, list[dict[str, Any]]] = {loop: [] for loop in loops}
    for _ in range(repeats):  # the loops in turn, so that a busy moment of the machine hits both
        for loop in loops:
            session = engine.create_session(apply_prompt_template=False, loop=loop)
            list(session.generate_tokens(list(prompt), args.decode_tokens))  # greedy: no stop with random weights
            runs[loop].append(rates(engine.timing))
    for loop in loops:
        report["runs"][f"gpuengine_{loop}_loop"] = best_of(runs[loop])
    try:
        cpu_runs = []
        for _ in range(repeats):
            ref = LiteRTDecoder(engine.bundle.model, engine.cache_length, num_threads=os.cpu_count())
            ref.generate(list(prompt), args.decode_tokens)
            cpu_runs.append(rates(ref.timing))
        report["runs"]["litert_cpu_interpreter"] = best_of(cpu_runs)
    except ImportError:
        report["runs"]["litert_cpu_interpreter"] = {"error": "ai-edge-litert is not installed"}
    if str(args.model).endswith(".litertlm"):
        for backend in ("cpu", "gpu"):
            report["runs"][f"litert_lm_{backend}"] = litert_lm_benchmark(args.model, backend, args.prompt_tokens,
                                                                         args.decode_tokens)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"model: {report['model']}, adapter: {report['adapter']}, KV cache {engine.cache_length}, vocabulary "
          f"{engine.vocab}, prefill signatures {report['prefill_signatures']}, compile {engine.compile_s:.1f} s, "
          f"GPU memory {report['gpu_memory_bytes'] / 2**20:.1f} MiB")
    if "gpu_loop_unavailable" in report:
        print(f"GPU decode loop unavailable: {report['gpu_loop_unavailable']}")
    print(f"{'runtime':<26} {'TTFT ms':>9} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for key, r in report["runs"].items():
        if "error" in r:
            print(f"{key:<26} could not run: {r['error']}")
            continue
        fmt = [f"{v:.1f}" if isinstance(v, float) else "-" for v in
               (r["ttft_ms"], r["prefill_tokens_per_s"], r["decode_tokens_per_s"])]
        print(f"{key:<26} {fmt[0]:>9} {fmt[1]:>14} {fmt[2]:>13}")
    return 0


def add_parser(sub: Any) -> None:
    gen = sub.add_parser("generate", help="generate text from a .litertlm / .task bundle or a .tflite + tokenizer "
                                          "(text on stdout, timings on stderr)")
    gen.add_argument("model", help="a .litertlm / .task bundle, or a .tflite decoder with --tokenizer")
    gen.add_argument("--prompt", required=True, help="the text to continue")
    gen.add_argument("--tokenizer", help="tokenizer file for a bare .tflite (SentencePiece .model or tokenizer.json)")
    gen.add_argument("--max-tokens", type=int, default=64, help="tokens to generate at most (default 64)")
    gen.add_argument("--temperature", type=float, help="sampling temperature (default: the bundle's sampler)")
    gen.add_argument("--top-k", type=int,
                     help="sample among the k likeliest tokens; 1: greedy (default: the bundle's sampler)")
    gen.add_argument("--top-p", type=float, help="sample among the likeliest tokens whose probabilities sum to p "
                                                 "(default: the bundle's sampler)")
    gen.add_argument("--seed", type=int, help="seed of the sampler (default: the bundle's sampler)")
    gen.add_argument("--no-template", action="store_true",
                     help="feed the prompt as LiteRT-LM's session with apply_prompt_template=False: the start "
                          "token, then the prompt's tokens")
    gen.add_argument("--loop", choices=["auto", "gpu", "host"], default="auto",
                     help="decode loop: sampling on the GPU (auto where the model allows) or on the host")
    gen.add_argument("--steps-ahead", type=int, default=4, help="decode steps in flight in the GPU loop")
    add_engine_options(gen)
    gen.set_defaults(func=cmd_generate)


def add_bench_options(bench: Any) -> None:
    bench.add_argument("--llm", action="store_true", help="language-model figures: TTFT, prefill and decode "
                                                          "tokens/s, GPU memory (MODEL: a bundle)")
    bench.add_argument("--tokenizer", help="with --llm: tokenizer file for a bare .tflite")
    bench.add_argument("--prompt-tokens", type=int, default=16, help="with --llm: prompt length")
    bench.add_argument("--decode-tokens", type=int, default=32, help="with --llm: tokens to generate")
