"""Write a gpuengine.zoo decoder (litert-torch's op patterns, seeded random weights) of SmolLM-135M's shape to a
file, at any number of layers: the real model has 30, ../shared/models/smollm_4l_int8.tflite 4. Used for the
predictions in docs/benchmarks.md (`gpuengine predict OUT --signature decode --device h100`).

    python scripts/dev/write_decoder.py OUT [--layers 30]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuengine.zoo.decoder import DecoderConfig, decoder

SMOLLM_135M = DecoderConfig(layers=30, width=576, heads=9, kv_heads=3, head_dim=64, mlp=1536, vocab=49152, cache=256,
                            prefill=32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .tflite to write")
    parser.add_argument("--layers", type=int, default=SMOLLM_135M.layers, help="decoder layers (default 30)")
    args = parser.parse_args()
    Path(args.out).write_bytes(decoder(SMOLLM_135M, layers=args.layers))


if __name__ == "__main__":
    main()
