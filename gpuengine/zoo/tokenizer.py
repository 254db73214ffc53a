"""A SentencePiece tokenizer of any vocabulary size for the zoo's decoders (and any decoder without one): trained
by SentencePiece's own trainer on the short English text the package ships (tokenizer_text.txt), deterministic
(one thread, fixed seed), built once per process.

The text holds a few hundred distinct pieces; a larger vocabulary is the trained pieces followed by filler pieces
`▁w<id>` (scored below every trained piece, so encoding ordinary text never picks them, while decoding shows each
id as a word): every id a model can generate has text, and the start/stop ids are SentencePiece's (<s> 1, </s> 2).
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

TEXT = Path(__file__).with_name("tokenizer_text.txt")
TRAINED = 256  # pieces learned from the text; larger vocabularies are padded with filler pieces
SMALLEST = 64  # below this the text's characters and the special pieces do not fit


def _sentencepiece():  # noqa: ANN202 - the module, imported where it is needed
    try:
        import sentencepiece
    except ImportError as e:
        raise ImportError("training a tokenizer needs `sentencepiece` (pip install 'gpuengine[llm]')") from e
    return sentencepiece


@functools.cache
def sentencepiece_model(vocab: int, seed: int = 0) -> bytes:
    """A serialized SentencePiece model of exactly `vocab` pieces (<unk> 0, <s> 1, </s> 2)."""
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < SMALLEST:
        raise ValueError(f"a tokenizer's vocabulary must be an integer >= {SMALLEST}, got {vocab!r}")
    spm = _sentencepiece()
    from sentencepiece import sentencepiece_model_pb2

    spm.set_random_generator_seed(int(seed))
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT.read_text(encoding="utf-8").splitlines()),
                                   model_writer=out, vocab_size=min(vocab, TRAINED), model_type="unigram",
                                   character_coverage=1.0, num_threads=1, minloglevel=2)
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(out.getvalue())
    lowest = min(piece.score for piece in model.pieces)
    for i in range(len(model.pieces), vocab):
        piece = model.pieces.add()
        piece.piece, piece.score = f"\u2581w{i}", lowest - 1.0
        piece.type = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    model.trainer_spec.vocab_size = vocab
    return model.SerializeToString()
