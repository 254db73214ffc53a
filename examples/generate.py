"""Greedy decoding with a litert-torch decoder (prefill + decode signatures) whose KV cache stays on the GPU.

The prompt goes through the `prefill` signature; each `decode` step then takes one token and its position. The
KV-cache outputs of one call are the next call's inputs without leaving the GPU: the decode runner reads the
prefill runner's cache buffers first, then its own outputs of the step before (copied on the GPU at the start of
each step), and reads back only the logits. A step uploads 8 bytes (token and position) and reads back the
vocabulary's logits. The tokens are checked against LiteRT's greedy decode of the same prompt (the caches
passed through the host, as LiteRT users do); the exit status is 1 on a mismatch.

Run: .venv/bin/python examples/generate.py [--model toy_decoder_kv.tflite] [--tokens 32] [--prompt 3,14,15,92]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from gpuengine import Interpreter

DEFAULT_MODEL = Path(os.environ.get("GPUENGINE_SHARED_MODELS", "/work/shared/models")) / "toy_decoder_kv.tflite"


def cache_names(runner: object) -> list[str]:
    """The KV-cache inputs of a signature: every input that is also an output (litert-torch's convention)."""
    return sorted(set(runner.get_input_details()) & set(runner.get_output_details()))


def prefill_feeds(runner: object, prompt: list[int]) -> dict[str, np.ndarray]:
    """The prompt padded to the prefill length, positions 0.., an empty cache. Padding rows are written to the
    cache too, at positions the decode steps overwrite before the causal mask lets them be read."""
    details = runner.get_input_details()
    length = int(details["tokens"]["shape"][-1])
    if not 0 < len(prompt) <= length:
        raise ValueError(f"the prompt has {len(prompt)} tokens; the prefill signature takes 1 to {length}")
    tokens = np.zeros((1, length), np.int32)
    tokens[0, :len(prompt)] = prompt
    feeds = {"tokens": tokens, "input_pos": np.arange(length, dtype=np.int32)}
    for name in cache_names(runner):
        feeds[name] = np.zeros(details[name]["shape"], np.float32)
    return feeds


def step_feeds(token: int, position: int) -> dict[str, np.ndarray]:
    return {"tokens": np.array([[token]], np.int32), "input_pos": np.array([position], np.int32)}


def generate_litert(model_path: str | os.PathLike, prompt: list[int], steps: int) -> tuple[list[int], float]:
    """LiteRT's greedy decode (CPU): the tokens and the decode steps per second."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    interpreter = LiteRT(model_path=str(model_path))
    prefill, decode = interpreter.get_signature_runner("prefill"), interpreter.get_signature_runner("decode")
    out = prefill(**prefill_feeds(prefill, prompt))
    caches = {name: out[name] for name in cache_names(decode)}
    tokens = [int(np.argmax(out["logits"][0, len(prompt) - 1]))]
    start = time.perf_counter()
    for k in range(steps - 1):
        out = decode(**step_feeds(tokens[-1], len(prompt) + k), **caches)
        caches = {name: out[name] for name in caches}
        tokens.append(int(np.argmax(out["logits"].reshape(-1))))
    return tokens, (steps - 1) / max(time.perf_counter() - start, 1e-9)


def generate_gpu(interpreter: Interpreter, prompt: list[int], steps: int) -> tuple[list[int], float]:
    """gpuengine's greedy decode with the cache on the GPU: the tokens (the first from prefill) and the decode
    steps per second."""
    prefill, decode = interpreter.get_signature_runner("prefill"), interpreter.get_signature_runner("decode")
    names = cache_names(decode)
    out = prefill.run(prefill_feeds(prefill, prompt), outputs=["logits"])  # the cache stays on the GPU
    for name in names:  # the first step reads the prompt's cache where prefill left it
        decode.set_input_buffer(name, prefill.output_buffer(name))
    tokens = [int(np.argmax(out["logits"][0, len(prompt) - 1]))]
    start = time.perf_counter()
    for k in range(steps - 1):
        out = decode.run(step_feeds(tokens[-1], len(prompt) + k), outputs=["logits"])
        if k == 0:  # from now on each step reads its own previous step's cache (copied on the GPU)
            for name in names:
                decode.set_input_buffer(name, decode.output_buffer(name))
        tokens.append(int(np.argmax(out["logits"].reshape(-1))))
    return tokens, (steps - 1) / max(time.perf_counter() - start, 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--tokens", type=int, default=32, help="tokens to generate")
    parser.add_argument("--prompt", default="3,14,15,92,65,35,89,79", help="comma-separated token ids")
    args = parser.parse_args()
    prompt = [int(v) for v in args.prompt.split(",")]
    interpreter = Interpreter(model_path=args.model)
    generate_gpu(interpreter, prompt, 3)  # compile both signatures before timing
    ours, ours_rate = generate_gpu(interpreter, prompt, args.tokens)
    theirs, theirs_rate = generate_litert(args.model, prompt, args.tokens)
    print(f"adapter: {interpreter.get_signature_runner('decode').compiled.gpu.name}")
    print(f"prompt {prompt} -> {ours}")
    print(f"gpuengine (KV cache on the GPU): {ours_rate:8.1f} tokens/s")
    print(f"LiteRT CPU (cache through the host): {theirs_rate:8.1f} tokens/s")
    if ours != theirs:
        first = next(k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        print(f"MISMATCH at token {first}: LiteRT gives {theirs}")
        return 1
    print(f"{len(ours)} tokens equal to LiteRT's greedy decode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
