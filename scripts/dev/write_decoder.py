"""Write a gpuengine.zoo decoder (litert-torch's op patterns, seeded random weights) of SmolLM-135M's shape (or
Gemma-3-270M's: 18 layers, width 640, 4 query heads on 1 KV head of 256, MLP 2048, vocabulary 262,144, Gemma's
norms and GELU-tanh MLP; every layer global, cache 1024) to a file, at any number of layers: SmolLM-135M has 30,
../shared/models/smollm_4l_int8.tflite is its first 4. Used for the predictions in docs/benchmarks.md
(`gpuengine predict OUT --signature decode --device h100`).

    python scripts/dev/write_decoder.py OUT [--shape smollm_135m|gemma3_270m] [--layers N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuengine.zoo.decoder import DecoderConfig, decoder

SMOLLM_135M = DecoderConfig(layers=30, width=576, heads=9, kv_heads=3, head_dim=64, mlp=1536, vocab=49152, cache=256,
                            prefill=32)
GEMMA3_270M = DecoderConfig(layers=18, width=640, heads=4, kv_heads=1, head_dim=256, mlp=2048, vocab=262144,
                            cache=1024, prefill=32, gemma=True, epsilon=1e-6)
SHAPES = {"smollm_135m": SMOLLM_135M, "gemma3_270m": GEMMA3_270M}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .tflite to write")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm_135m", help="the model's shape")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the shape's)")
    args = parser.parse_args()
    config = SHAPES[args.shape]
    Path(args.out).write_bytes(decoder(config, layers=args.layers or config.layers))


if __name__ == "__main__":
    main()
