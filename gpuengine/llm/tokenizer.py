"""Tokenizers through their own libraries: SentencePiece (`sentencepiece`) or Hugging Face (`tokenizers`), never
hand-written. `pip install 'gpuengine[llm]'`.

A decoder without a tokenizer gets one of its vocabulary size (`python -m gpuengine.llm.make_tokenizer --vocab N
OUT.model`: SentencePiece trained on the text the package ships, gpuengine/zoo/tokenizer.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ModelError

UTF8_BOM = b"\xef\xbb\xbf"


def check_text(text: str) -> None:
    """Text a tokenizer can take: a str of Unicode scalar values (ValueError naming a lone surrogate, which
    neither library can encode, and its position)."""
    if not isinstance(text, str):
        raise ValueError(f"text to tokenize must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"the text has a lone surrogate U+{ord(text[e.start]):04X} at character {e.start}: not "
                         "Unicode text a tokenizer can encode (decode the bytes with errors='replace' first)") from None


class Tokenizer:
    """encode(text) -> ids (no start token), decode(ids) -> text; start/stop ids the tokenizer knows."""

    kind = ""
    vocab_size = 0
    bos_id: int | None = None
    eos_id: int | None = None

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError


class SentencePieceTokenizer(Tokenizer):
    kind = "sentencepiece"

    def __init__(self, model: bytes, section: str = "tokenizer") -> None:
        try:
            import sentencepiece
        except ImportError as e:
            raise ImportError("a SentencePiece tokenizer needs `sentencepiece` (pip install 'gpuengine[llm]')") from e
        self._sp = sentencepiece.SentencePieceProcessor()
        self._model = bytes(model)
        self._plain: Any = None  # the same model without the dummy word-boundary prefix (encode_plain)
        try:
            self._sp.LoadFromSerializedProto(bytes(model))
        except Exception as e:  # noqa: BLE001 - sentencepiece raises RuntimeError / OSError by version
            raise ModelError(f"{section}: not a SentencePiece model ({e})") from e
        self.vocab_size = int(self._sp.vocab_size())
        self.bos_id = int(self._sp.bos_id()) if self._sp.bos_id() >= 0 else None
        self.eos_id = int(self._sp.eos_id()) if self._sp.eos_id() >= 0 else None

    def encode(self, text: str) -> list[int]:
        check_text(text)
        return [int(t) for t in self._sp.encode(text)]

    def decode(self, ids: list[int]) -> str:
        return self._sp.decode([int(t) for t in ids])

    def encode_plain(self, text: str) -> list[int]:
        """The ids of `text` as a continuation of other text: without the word-boundary mark SentencePiece puts
        before a text's first piece, spaces kept as they are (what a constrained decoder tokenizes forced text
        with: the ids must spell the text's bytes exactly)."""
        if self._plain is None:
            import sentencepiece
            from sentencepiece import sentencepiece_model_pb2

            proto = sentencepiece_model_pb2.ModelProto()
            proto.ParseFromString(self._model)
            proto.normalizer_spec.add_dummy_prefix = False
            proto.normalizer_spec.remove_extra_whitespaces = False  # a trailing or doubled space is text too
            self._plain = sentencepiece.SentencePieceProcessor()
            self._plain.LoadFromSerializedProto(proto.SerializeToString())
        check_text(text)
        return [int(t) for t in self._plain.encode(text)]

    def token_bytes(self) -> tuple[list[bytes], list[int]]:
        """Each id's bytes as it spells text (the word-boundary mark as a space, byte pieces as their byte) and the
        ids of control, unknown and unused pieces, which spell no text: their bytes are 0xFF and the piece's name,
        llguidance's mark of a special token (unique: a table with equal entries misleads its token trie)."""
        sp = self._sp
        tokens, special = [], []
        for i in range(self.vocab_size):
            piece = sp.id_to_piece(i)
            if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i):
                tokens.append(b"\xff" + piece.encode("utf-8"))
                special.append(i)
            elif sp.is_byte(i):
                tokens.append(bytes([int(piece[3:5], 16)]))
            else:
                tokens.append(piece.replace("\u2581", " ").encode("utf-8"))
        return tokens, special


class HuggingFaceTokenizer(Tokenizer):
    kind = "huggingface"

    def __init__(self, json_text: bytes | str, section: str = "tokenizer") -> None:
        try:
            from tokenizers import Tokenizer as HF
        except ImportError as e:
            raise ImportError("a Hugging Face tokenizer needs `tokenizers` (pip install 'gpuengine[llm]')") from e
        text = json_text.decode("utf-8-sig", "replace") if isinstance(json_text, bytes) else json_text.lstrip("\ufeff")
        try:
            self._tok: Any = HF.from_str(text)
        except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception type
            raise ModelError(f"{section}: not a Hugging Face tokenizer.json ({e})") from e
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        check_text(text)
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode([int(t) for t in ids], skip_special_tokens=False)

    def to_json(self) -> str:
        """The tokenizer.json text (what llguidance builds its tokenizer from)."""
        return self._tok.to_str()


def load_tokenizer(data: bytes, name: str = "tokenizer") -> Tokenizer:
    """A tokenizer file's bytes: tokenizer.json (Hugging Face) when it is JSON (a UTF-8 byte-order mark allowed),
    else a SentencePiece model; ModelError naming `name` when neither library reads it."""
    body = data[len(UTF8_BOM):] if data.startswith(UTF8_BOM) else data
    if not body.strip():
        raise ModelError(f"{name}: empty, not a SentencePiece model or a tokenizer.json")
    if body.lstrip()[:1] == b"{":
        return HuggingFaceTokenizer(data, name)
    return SentencePieceTokenizer(data, name)


def read_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """A tokenizer file (SentencePiece .model or tokenizer.json); ModelError for a directory, a missing or
    unreadable file, or one neither library reads."""
    path = Path(path)
    name = f"tokenizer file {path}"
    if path.is_dir():
        raise ModelError(f"{name}: is a directory; give the tokenizer file in it (tokenizer.model or tokenizer.json)")
    if not path.is_file():
        raise ModelError(f"{name}: no such file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelError(f"{name}: cannot be read ({e.strerror or e})") from e
    return load_tokenizer(data, name)


class StreamDecoder:
    """Text pieces as tokens arrive: decodes the whole reply so far and hands out what is new (a SentencePiece
    piece's leading space, or a character split over several byte tokens, comes out right); holds back a trailing
    U+FFFD until the rest of its character arrives."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer, self.ids, self.sent = tokenizer, [], ""

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        piece = text[len(self.sent):] if text.startswith(self.sent) else text
        self.sent = text
        return piece

    def flush(self) -> str:
        text = self.tokenizer.decode(self.ids)
        piece = text[len(self.sent):] if text.startswith(self.sent) else ""
        self.sent = text
        return piece

