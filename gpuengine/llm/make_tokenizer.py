"""`python -m gpuengine.llm.make_tokenizer --vocab N OUT.model`: a SentencePiece tokenizer of a decoder's vocabulary
size for a model that ships without one, trained on the text gpuengine ships (gpuengine/zoo/tokenizer.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..zoo.tokenizer import sentencepiece_model


def main(argv: list[str] | None = None) -> int:
    """Write the tokenizer; exit 2 with one line for a bad --vocab or an unwritable path."""
    parser = argparse.ArgumentParser(prog="python -m gpuengine.llm.make_tokenizer",
                                     description="Write a SentencePiece tokenizer of a decoder's vocabulary size, "
                                                 "trained on the text gpuengine ships (for models without one).")
    parser.add_argument("out", help="the .model file to write")
    parser.add_argument("--vocab", type=int, required=True, help="pieces: the model's vocabulary size (its logits)")
    parser.add_argument("--seed", type=int, default=0, help="the trainer's seed (default 0)")
    args = parser.parse_args(argv)
    try:
        data = sentencepiece_model(args.vocab, args.seed)
        Path(args.out).write_bytes(data)
    except (ValueError, ImportError, OSError) as e:
        print(f"gpuengine: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: a SentencePiece tokenizer of {args.vocab} pieces (<s> 1, </s> 2)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
