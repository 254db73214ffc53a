"""Write a gpuengine.zoo decoder (litert-torch's op patterns, seeded random weights) of SmolLM-135M's shape to a
file, at any number of layers: the real model has 30, ../shared/models/smollm_4l_int8.tflite 4. Used for the
predictions in docs/benchmarks.md (`gpuengine predict OUT --signature decode --device h100`).

    python scripts/dev/write_decoder.py OUT [--layers 30] [--shape smollm-135m|gemma3-270m]

gemma3-270m: Gemma-3-270M's sizes (18 layers, width 640, 4 query heads of 256 over 1 KV head, MLP 2048, vocabulary
262,144; cache 1024 here) in the zoo's llama-style layers (no sandwich norms, no sliding window).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuengine.zoo.decoder import DecoderConfig, decoder

SMOLLM_135M = DecoderConfig(layers=30, width=576, heads=9, kv_heads=3, head_dim=64, mlp=1536, vocab=49152, cache=256,
                            prefill=32)
GEMMA3_270M = DecoderConfig(layers=18, width=640, heads=4, kv_heads=1, head_dim=256, mlp=2048, vocab=262144,
                            cache=1024, prefill=32)
SHAPES = {"smollm-135m": SMOLLM_135M, "gemma3-270m": GEMMA3_270M}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .tflite to write")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the shape's)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm-135m", help="sizes (default smollm-135m)")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    Path(args.out).write_bytes(decoder(shape, layers=args.layers or shape.layers))


if __name__ == "__main__":
    main()
