"""gpuengine against LiteRT on a litert-torch decoder (prefill_N + decode signatures, KV cache as inputs/outputs).

One run measures both things the issue asks for: a prompt through the prefill signature, then `steps` decode steps
in which BOTH interpreters are fed LiteRT's greedy token (teacher forcing). Per step: gpuengine's logits against
LiteRT's, relative to the range of LiteRT's logits, and whether the two argmaxes agree. Until the first
disagreement teacher forcing is exactly free-running greedy decoding, so `greedy_equal` (the leading steps whose
argmax agrees) is the number of steps greedy generation gives LiteRT's tokens. The oracle is LiteRT's default
interpreter (XNNPACK) or its builtin kernels (`oracle="builtin"`).

Usage: python scripts/dev/decoder_parity.py MODEL [--steps 32] [--precision fp16] [--oracle builtin] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpuengine.oracle import litert_interpreter, range_error


@dataclass
class Parity:
    """What one prefill + teacher-forced decode run measured."""

    steps: int
    prefill_signature: str
    prefill_cache_error: float  # max over caches of max|ours - LiteRT| / range(LiteRT) after prefill
    step_errors: list[float] = field(default_factory=list)  # logits, relative to LiteRT's range, per decode step
    argmax_agree: int = 0  # decode steps whose argmax equals LiteRT's
    greedy_equal: int = 0  # leading steps whose argmax equals LiteRT's: greedy decoding gives LiteRT's tokens

    @property
    def median_error(self) -> float:
        return float(np.median(self.step_errors))

    @property
    def max_error(self) -> float:
        return float(np.max(self.step_errors))

    def summary(self) -> dict[str, Any]:
        return {**asdict(self), "median_error": self.median_error, "max_error": self.max_error}


def prefill_key(interpreter: Any) -> str:
    return next(k for k in interpreter.get_signature_list() if k.startswith("prefill"))


def compare(ours: Any, theirs: Any, steps: int = 32, seed: int = 0, prompt_tokens: int | None = None) -> Parity:
    """Prefill a seeded random prompt, then `steps` teacher-forced decode steps. The prompt fills the prefill
    signature, or its first `prompt_tokens` positions (the rest padded with token 0 at later positions, which the
    decode steps overwrite before their causal mask reaches them): room for the steps in a cache no longer than
    the prefill."""
    key = prefill_key(theirs)
    details = theirs.get_signature_runner(key).get_input_details()
    length = int(details["tokens"]["shape"][-1])
    used = length if prompt_tokens is None else prompt_tokens
    if not 1 <= used <= length:
        raise ValueError(f"prompt_tokens must be 1..{length} (the {key} signature's tokens), got {prompt_tokens}")
    vocab = int(theirs.get_signature_runner("decode").get_output_details()["logits"]["shape"][-1])
    prompt = np.random.default_rng(seed).integers(1, vocab, (1, length)).astype(np.int32)
    prompt[0, used:] = 0
    zeros = {n: np.zeros(d["shape"], d["dtype"]) for n, d in details.items() if n.startswith("kv_cache")}
    feeds = {"tokens": prompt, "input_pos": np.arange(length, dtype=np.int32), **zeros}
    caches = [ours.get_signature_runner(key)(**feeds), theirs.get_signature_runner(key)(**feeds)]
    names = sorted(zeros)
    caches = [{n: c[n] for n in names} for c in caches]
    result = Parity(steps=steps, prefill_signature=key,
                    prefill_cache_error=max(range_error(caches[0][n], caches[1][n]) for n in names))
    decoders = [ours.get_signature_runner("decode"), theirs.get_signature_runner("decode")]
    token = int(prompt[0, used - 1])
    greedy = True
    for step in range(steps):
        step_feeds = {"tokens": np.array([[token]], np.int32), "input_pos": np.array([used + step], np.int32)}
        logits = []
        for i, runner in enumerate(decoders):
            out = runner(**step_feeds, **caches[i])
            logits.append(out["logits"].reshape(-1))
            caches[i] = {n: out[n] for n in names}
        result.step_errors.append(range_error(logits[0], logits[1]))
        agree = int(np.argmax(logits[0])) == int(np.argmax(logits[1]))
        result.argmax_agree += agree
        greedy = greedy and agree
        result.greedy_equal += greedy
        token = int(np.argmax(logits[1]))
    return result


def decode_step_vs_float64(model: bytes, interpreters: list[Any], position: int = 20, seed: int = 0) -> list[float]:
    """Each interpreter's decode logits error relative to the float64 reference executor (reference.SignatureRunner:
    int8 weights dequantized, activations unquantized) on one decode step at `position` over seeded random caches
    (drawn in the order of the last interpreter's decode inputs): e.g. whether the engine is further from the exact
    answer than LiteRT is."""
    from gpuengine.reference import SignatureRunner

    runners = [it.get_signature_runner("decode") for it in interpreters]
    rng = np.random.default_rng(seed)
    feeds = {"tokens": np.array([[5]], np.int32), "input_pos": np.array([position], np.int32)}
    for name, detail in runners[-1].get_input_details().items():
        if name.startswith("kv_cache"):
            feeds[name] = (rng.standard_normal(detail["shape"]) * 0.5).astype(np.float32)
    exact = SignatureRunner(model, "decode")(**feeds)["logits"]
    return [range_error(runner(**feeds)["logits"], exact) for runner in runners]


def planned_dispatches(model: bytes | str, key: str, target: str = "cpu") -> list:
    """The dispatches (KernelSpecs) of every GPU partition of a signature, planned for an adapter class without
    compiling (nothing touches a GPU), fusions included."""
    from gpuengine import planning as engine
    from gpuengine.latency.target import named
    from gpuengine.model.reader import read_model
    from gpuengine.options import EngineOptions

    parsed = read_model(model)
    signature = next(s for s in parsed.signatures if s.key == key)
    graph = parsed.subgraphs[signature.subgraph]
    _, programs = engine.planned_dispatches(graph, EngineOptions(), named(target), parsed)
    return [spec for specs in programs for spec in specs]


def dispatches_per_layer(specs: list) -> list[int]:
    """Dispatches between consecutive layers' attentions (a layer's first attention dispatch: flash-decoding's
    partials and merge are adjacent), the write offsets' PACK aside. (The KV cache write no longer marks a layer: it
    may be the QKV projection's epilogue.)"""
    shaders = [s.shader for s in specs if s.label != "PACK"]
    firsts = [i for i, s in enumerate(shaders)
              if s.startswith("attention") and (i == 0 or not shaders[i - 1].startswith("attention"))]
    return [b - a for a, b in zip(firsts, firsts[1:])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--oracle", choices=("xnnpack", "builtin"), default="xnnpack")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-tokens", type=int, default=None,
                        help="prompt length (default: the whole prefill signature); leave room for the steps in the "
                             "KV cache")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from gpuengine import Interpreter

    data = open(args.model, "rb").read()
    oracle = litert_interpreter(data, builtin=args.oracle == "builtin")
    try:
        result = compare(Interpreter(model_content=data, precision=args.precision), oracle, args.steps, args.seed,
                         args.prompt_tokens)
    except (ValueError, RuntimeError) as e:
        print(f"decoder_parity: {e}\n(positions past the KV cache? a smaller --prompt-tokens or fewer --steps)",
              file=sys.stderr)
        return 2
    summary = {"model": args.model, "precision": args.precision, "oracle": args.oracle, **result.summary()}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{args.model} ({args.precision} vs LiteRT {args.oracle}): prefill caches "
              f"{result.prefill_cache_error:.2e} of range; decode logits over {args.steps} teacher-forced steps "
              f"median {result.median_error:.2e}, "
              f"max {result.max_error:.2e} of range; argmax agrees {result.argmax_agree}/{args.steps}, greedy tokens "
              f"equal for the first {result.greedy_equal}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
