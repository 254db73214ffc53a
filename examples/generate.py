"""Text in, text out: a language-model bundle (.litertlm, MediaPipe .task, or a litert-torch .tflite with its
tokenizer) generates a reply with the decode loop on the GPU, and the tokens are checked against LiteRT's
Interpreter driving the same signatures on the CPU (greedy; the exit status is 1 on a mismatch).

The GPU loop: each decode step is followed, in the same submission, by a sampler kernel that writes the next
token and position where the next step reads them; 4 steps are in flight and the host reads back only the 4-byte
token ids (gpuengine/llm/engine.py).

A bare .tflite without a tokenizer runs the signatures by hand on token ids (--prompt-ids): prefill, then greedy
decode steps with the KV cache kept on the GPU (decode reads its own last outputs, copied on the GPU), reading
back the logits: what the engine does under the hood, with the Interpreter's GPU-buffer API.

Run: .venv/bin/python examples/generate.py MODEL [--tokenizer FILE] [--prompt TEXT] [--max-tokens 32]
     .venv/bin/python examples/generate.py MODEL.tflite --prompt-ids 3,14,15,92 [--max-tokens 32]
     e.g. MODEL = a bundle `litert-lm-builder` packed from ../shared/models/toy_decoder_kv.tflite
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from gpuengine import Interpreter
from gpuengine.llm import Engine, SamplerConfig
from gpuengine.llm.reference import LiteRTDecoder


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


def prefill_key(interpreter: object, prompt: list[int]) -> str:
    """The prefill signature for a prompt: litert-torch names them prefill or prefill_N (N tokens); the shortest
    that takes the prompt."""
    keys = [k for k in interpreter.get_signature_list() if k.startswith("prefill")]
    if not keys or "decode" not in interpreter.get_signature_list():
        raise SystemExit(f"--prompt-ids needs a model with prefill and decode signatures; it has "
                         f"{sorted(interpreter.get_signature_list())}")
    length = {k: int(interpreter.get_signature_runner(k).get_input_details()["tokens"]["shape"][-1]) for k in keys}
    fits = sorted((n, k) for k, n in length.items() if n >= len(prompt))
    if not fits:
        raise SystemExit(f"the prompt has {len(prompt)} tokens; the prefill signatures take at most "
                         f"{max(length.values())}")
    return fits[0][1]


def prefilled_prompt(prefill: object, prompt: list[int]) -> tuple[list[int], int | None]:
    """What prefill takes and the token left for the first decode step: the whole prompt and None when prefill
    returns logits, else (litert-torch's LLM converter writes prefill without logits) all but the last token."""
    if "logits" in prefill.get_output_details():
        return prompt, None
    if len(prompt) < 2:
        raise SystemExit("this model's prefill returns no logits: give at least 2 prompt ids")
    return prompt[:-1], prompt[-1]


def step_feeds(token: int, position: int) -> dict[str, np.ndarray]:
    return {"tokens": np.array([[token]], np.int32), "input_pos": np.array([position], np.int32)}


def generate_litert(model_path: str | os.PathLike, prompt: list[int], steps: int) -> tuple[list[int], float]:
    """LiteRT's greedy decode (CPU): the tokens and the decode steps per second."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    interpreter = LiteRT(model_path=str(model_path))
    prefill = interpreter.get_signature_runner(prefill_key(interpreter, prompt))
    decode = interpreter.get_signature_runner("decode")
    head, first = prefilled_prompt(prefill, prompt)
    out = prefill(**prefill_feeds(prefill, head))
    caches = {name: out[name] for name in cache_names(decode)}
    if first is None:
        tokens, position = [int(np.argmax(out["logits"][0, len(prompt) - 1]))], len(prompt)
    else:  # the prefill signature has no logits: the prompt's last token goes through decode
        out = decode(**step_feeds(first, len(head)), **caches)
        caches = {name: out[name] for name in caches}
        tokens, position = [int(np.argmax(out["logits"].reshape(-1)))], len(prompt)
    start = time.perf_counter()
    for k in range(steps - 1):
        out = decode(**step_feeds(tokens[-1], position + k), **caches)
        caches = {name: out[name] for name in caches}
        tokens.append(int(np.argmax(out["logits"].reshape(-1))))
    return tokens, (steps - 1) / max(time.perf_counter() - start, 1e-9)


def generate_gpu(interpreter: Interpreter, prompt: list[int], steps: int) -> tuple[list[int], float]:
    """gpuengine's greedy decode with the cache on the GPU: the tokens (the first from prefill) and the decode
    steps per second."""
    prefill = interpreter.get_signature_runner(prefill_key(interpreter, prompt))
    decode = interpreter.get_signature_runner("decode")
    names = cache_names(decode)
    head, first = prefilled_prompt(prefill, prompt)
    out = prefill.run(prefill_feeds(prefill, head), outputs=["logits"] if first is None else [])  # cache stays on GPU
    for name in names:  # the first step reads the prompt's cache where prefill left it
        decode.set_input_buffer(name, prefill.output_buffer(name))
    position, chained = len(prompt), False
    if first is None:
        tokens = [int(np.argmax(out["logits"][0, len(prompt) - 1]))]
    else:  # the prefill signature has no logits: the prompt's last token goes through decode
        out = decode.run(step_feeds(first, len(head)), outputs=["logits"])
        tokens, chained = [int(np.argmax(out["logits"].reshape(-1)))], True
        for name in names:
            decode.set_input_buffer(name, decode.output_buffer(name))
    start = time.perf_counter()
    for k in range(steps - 1):
        out = decode.run(step_feeds(tokens[-1], position + k), outputs=["logits"])
        if not chained:  # from now on each step reads its own previous step's cache (copied on the GPU)
            for name in names:
                decode.set_input_buffer(name, decode.output_buffer(name))
            chained = True
        tokens.append(int(np.argmax(out["logits"].reshape(-1))))
    return tokens, (steps - 1) / max(time.perf_counter() - start, 1e-9)


def run_signatures(model: str, prompt: list[int], steps: int) -> int:
    """The signatures by hand on token ids: gpuengine (cache on the GPU) against LiteRT (cache through the host)."""
    interpreter = Interpreter(model_path=model)
    generate_gpu(interpreter, prompt, 3)  # compile both signatures before timing
    ours, ours_rate = generate_gpu(interpreter, prompt, steps)
    theirs, theirs_rate = generate_litert(model, prompt, steps)
    print(f"prompt {prompt} -> {ours}")
    print(f"gpuengine (KV cache on the GPU): {ours_rate:8.1f} tokens/s; LiteRT CPU: {theirs_rate:8.1f} tokens/s")
    if ours != theirs:
        print(f"MISMATCH: LiteRT gives {theirs}")
        return 1
    print(f"{len(ours)} tokens equal to LiteRT's greedy decode")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a .litertlm / .task bundle, or a .tflite with --tokenizer")
    parser.add_argument("--tokenizer", help="SentencePiece .model or tokenizer.json for a bare .tflite")
    parser.add_argument("--prompt", default="The quick brown fox")
    parser.add_argument("--prompt-ids", help="comma-separated token ids: run a bare .tflite's signatures by hand")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    if args.prompt_ids:
        return run_signatures(args.model, [int(v) for v in args.prompt_ids.split(",")], args.max_tokens)
    engine = Engine(args.model, args.tokenizer, progress=True)
    session = engine.create_session(apply_prompt_template=False, sampler_config=SamplerConfig())
    ids = session.prompt_ids(args.prompt)
    for piece in session.generate_stream(args.prompt, args.max_tokens):
        print(piece, end="", flush=True)
    print()
    t, stats = engine.timing, engine.stats
    ours = session.history[len(ids):]
    print(f"{engine.loop} loop on {engine.decode.compiled.gpu.name}: first token after {t.ttft_s * 1e3:.0f} ms, "
          f"decode {t.decode_tokens / max(t.decode_s, 1e-9):.1f} tokens/s, {stats.bytes_read} bytes read back, "
          f"up to {stats.max_in_flight} steps in flight", file=sys.stderr)
    theirs = LiteRTDecoder(engine.bundle.model, engine.cache_length).generate(ids, args.max_tokens,
                                                                             stop=engine.bundle.stop_tokens)
    if ours != theirs:
        print(f"MISMATCH: gpuengine {ours}\n          LiteRT    {theirs}", file=sys.stderr)
        return 1
    print(f"{len(ours)} tokens equal to LiteRT's greedy decode (CPU)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
