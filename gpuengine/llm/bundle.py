"""Open what language-model users have: a LiteRT-LM bundle (`.litertlm`), a MediaPipe `.task` LLM bundle (a zip),
or a bare litert-torch `.tflite` plus a tokenizer file. Anything malformed or missing is a ModelError naming the
section.

`.litertlm` is read with the format's own schema and protos, shipped by `litert-lm-builder` (light: protobuf,
flatbuffers, absl-py, tomli): a 32-byte preamble ("LITERTLM", version, the header's end offset), a flatbuffer
header listing the sections (begin/end offsets, data type, key/value items such as model_type), then the sections:
TFLite model(s), a SentencePiece model or a zlib-compressed tokenizer.json, and the LlmMetadata proto (start and
stop tokens, prompt templates, sampler parameters, max_num_tokens).
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelError
from .tokenizer import Tokenizer, load_tokenizer, read_tokenizer

MAGIC = b"LITERTLM"
PREAMBLE = 32  # magic (8), version (3 x u32), header end offset (u64 at 24)
TASK_MODEL = "TF_LITE_PREFILL_DECODE"
TASK_TOKENIZER = "TOKENIZER_MODEL"
ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


@dataclass
class PromptTemplate:
    """Prefix and suffix of a role's turn (LlmMetadata.prompt_templates)."""

    prefix: str = ""
    suffix: str = ""


@dataclass
class Bundle:
    """What generation needs: the model bytes, the tokenizer and the metadata."""

    model: bytes
    tokenizer: Tokenizer
    source: str
    start_ids: list[int] = field(default_factory=list)
    stop_ids: list[list[int]] = field(default_factory=list)
    max_num_tokens: int = 0
    templates: dict[str, PromptTemplate] = field(default_factory=dict)
    sampler: dict[str, Any] = field(default_factory=dict)  # top_k, top_p, temperature, seed from the metadata
    # a Jinja chat template: LlmMetadata.jinja_prompt_template, or `chat_template` of the Hugging Face
    # tokenizer_config.json beside a tokenizer.json given as the tokenizer file (chat.py renders it)
    chat_template: str = ""
    sections: list[str] = field(default_factory=list)

    @property
    def stop_tokens(self) -> set[int]:
        """Single-token stop sequences (what the decode loop checks per token; longer ones end the reply after
        their last token, Session._generate)."""
        return {s[0] for s in self.stop_ids if len(s) == 1}


def prompt_tokens(bundle: Bundle, prompt: str, apply_template: bool, first: bool) -> list[int]:
    """A user turn's tokens: the start token first in a session (also without the template: LiteRT-LM's session
    with apply_prompt_template=False feeds it too), then with the template the user turn's prefix, the prompt, its
    suffix and the model turn's prefix (LlmMetadata.prompt_templates; a Jinja template is not rendered)."""
    text = prompt
    if apply_template and bundle.templates:
        user, model = bundle.templates.get("user"), bundle.templates.get("model")
        text = (user.prefix if user else "") + prompt + (user.suffix if user else "") + (model.prefix if model else "")
    ids = bundle.tokenizer.encode(text)
    return (list(bundle.start_ids) if first else []) + ids


ZOO_BUNDLES = ("decoder_tiny",)  # zoo decoders that open as bundles with no files: the model + a trained tokenizer


def zoo_bundle(name: str, seed: int = 0) -> Bundle:
    """Zoo decoder `name` (seeded random weights) with a SentencePiece tokenizer of its vocabulary trained on the
    text the package ships (gpuengine/zoo/tokenizer.py); start <s>, stop </s>. Both are built once per process."""
    from .. import zoo
    from ..zoo.tokenizer import sentencepiece_model

    if name not in ZOO_BUNDLES:
        raise KeyError(f"no zoo decoder named {name!r}; the zoo's decoders: {', '.join(ZOO_BUNDLES)}")
    model = zoo.get(name, seed)
    vocab = zoo.DecoderConfig().vocab  # decoder_tiny is the default configuration
    tokenizer = load_tokenizer(sentencepiece_model(vocab), f"{name} (zoo) tokenizer")
    return Bundle(model=model, tokenizer=tokenizer, source=f"{name} (zoo)", sections=["zoo decoder", "tokenizer"],
                  start_ids=[tokenizer.bos_id] if tokenizer.bos_id is not None else [],
                  stop_ids=[[tokenizer.eos_id]] if tokenizer.eos_id is not None else [])


def open_bundle(path: str | os.PathLike, tokenizer: str | os.PathLike | None = None) -> Bundle:
    """A `.litertlm`, a `.task`, a `.tflite` with `tokenizer` (a SentencePiece .model or a tokenizer.json) or a zoo
    decoder's name (ZOO_BUNDLES). A missing path is FileNotFoundError, a malformed file a ModelError naming the
    part."""
    if not Path(path).exists() and str(path) in ZOO_BUNDLES:
        bundle = zoo_bundle(str(path))
        if tokenizer is not None:
            bundle.tokenizer = read_tokenizer(tokenizer)
        return bundle
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, not a model file (a .litertlm, a .task or a .tflite)")
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path} (nor a zoo decoder: {', '.join(ZOO_BUNDLES)})")
    with open(path, "rb") as f:
        head = f.read(8)
    if head == MAGIC:
        bundle = read_litertlm(path.read_bytes(), str(path))
    elif head[:4] == b"PK\x03\x04":
        bundle = read_task(path.read_bytes(), str(path))
    elif head[4:8] == b"TFL3":
        if tokenizer is None:
            raise ValueError(f"{path} is a bare .tflite model: give its tokenizer too (--tokenizer FILE; one of the "
                             "model's vocabulary size: python -m gpuengine.llm.make_tokenizer --vocab N OUT.model)")
        tok = read_tokenizer(tokenizer)
        return Bundle(model=path.read_bytes(), tokenizer=tok, source=str(path),
                      chat_template=hf_chat_template(tokenizer), sections=["TFLiteModel", "tokenizer file"],
                      start_ids=[tok.bos_id] if tok.bos_id is not None else [],
                      stop_ids=[[tok.eos_id]] if tok.eos_id is not None else [])
    elif head.startswith(b"LITERT") or head.startswith(b"LITE"):
        raise ModelError(f"{path}: preamble: not a LiteRT-LM bundle (magic {head!r}, expected {MAGIC!r})")
    else:
        raise ModelError(f"{path}: not a .litertlm bundle, a .task zip or a .tflite model (starts with {head!r})")
    if tokenizer is not None:
        bundle.tokenizer = read_tokenizer(tokenizer)
        bundle.chat_template = hf_chat_template(tokenizer) or bundle.chat_template
    return bundle


def hf_chat_template(tokenizer: str | os.PathLike) -> str:
    """`chat_template` of the Hugging Face tokenizer_config.json in the tokenizer file's folder ("" without one):
    a string, or the entry named "default" of a list of {name, template}. A malformed file is a ModelError."""
    import json

    config = Path(tokenizer).parent / "tokenizer_config.json"
    if not config.is_file():
        return ""
    try:
        value = json.loads(config.read_text("utf-8")).get("chat_template") or ""
    except (OSError, ValueError, AttributeError) as e:
        raise ModelError(f"{config}: not a tokenizer_config.json object ({e})") from e
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default") or ""
    if not isinstance(value, str):
        raise ModelError(f"{config}: chat_template is a {type(value).__name__}, not a Jinja template string")
    return value


def _schema() -> tuple[Any, Any]:
    try:
        from litert_lm_builder import litertlm_header_schema_py_generated as schema
        from litert_lm_builder.runtime.proto import llm_metadata_pb2
    except ImportError as e:
        raise ImportError("reading .litertlm bundles needs the format's schema from `litert-lm-builder` "
                          "(pip install 'gpuengine[llm]')") from e
    return schema, llm_metadata_pb2


def _items(section: Any) -> dict[str, Any]:
    """A section's key/value items (model_type, ...) as Python values."""
    schema, _ = _schema()
    out = {}
    for j in range(section.ItemsLength()):
        item = section.Items(j)
        table = item.Value() if item is not None else None
        if item is None or item.Key() is None or table is None:
            continue
        if item.ValueType() == schema.VData.StringValue:
            value = schema.StringValue()
            value.Init(table.Bytes, table.Pos)
            out[item.Key().decode("utf-8", "replace")] = (value.Value() or b"").decode("utf-8", "replace")
    return out


def read_litertlm(data: bytes, source: str = "<bytes>") -> Bundle:
    schema, llm_metadata_pb2 = _schema()
    names = {v: k for k, v in vars(schema.AnySectionDataType).items() if not k.startswith("_")}
    if len(data) < PREAMBLE or data[:8] != MAGIC:
        raise ModelError(f"{source}: preamble: not a LiteRT-LM bundle ({len(data)} bytes, magic {data[:8]!r})")
    major = struct.unpack_from("<I", data, 8)[0]
    header_end = struct.unpack_from("<Q", data, 24)[0]
    if major != 1:
        raise ModelError(f"{source}: preamble: LiteRT-LM format version {major}, this reader knows version 1")
    if not PREAMBLE < header_end <= len(data):
        raise ModelError(f"{source}: header: ends at byte {header_end}, outside the file's {len(data)} bytes "
                         "(truncated or corrupt)")
    try:
        header = schema.LiteRTLMMetaData.GetRootAs(data[PREAMBLE:header_end], 0)
        table = header.SectionMetadata()
        count = table.ObjectsLength() if table is not None else 0
        sections = [table.Objects(i) for i in range(count)]
        spans = [(s.DataType(), s.BeginOffset(), s.EndOffset(), _items(s)) for s in sections]
    except Exception as e:  # noqa: BLE001 - flatbuffers raises struct.error / IndexError on a corrupt table
        raise ModelError(f"{source}: header: the section table is corrupt ({type(e).__name__}: {e})") from e
    model = tokenizer = metadata = None
    listed = []
    for i, (kind, begin, end, items) in enumerate(spans):
        name = names.get(kind, f"type {kind}")
        listed.append(name)
        where = f"{source}: section {i} ({name})"
        if not PREAMBLE <= begin <= end <= len(data):
            raise ModelError(f"{where}: bytes [{begin}, {end}) lie outside the file's {len(data)} bytes "
                             "(truncated or corrupt)")
        body = data[begin:end]
        if kind == schema.AnySectionDataType.TFLiteModel:
            model_type = items.get("model_type", "tf_lite_prefill_decode")
            if model_type in ("tf_lite_prefill_decode", "prefill_decode") and model is None:
                if body[4:8] != b"TFL3":
                    raise ModelError(f"{where}: not a TFLite flatbuffer (identifier {body[4:8]!r})")
                model = body
        elif kind == schema.AnySectionDataType.SP_Tokenizer and tokenizer is None:
            tokenizer = load_tokenizer(body, f"{where}")
        elif kind == schema.AnySectionDataType.HF_Tokenizer_Zlib and tokenizer is None:
            try:
                size = struct.unpack_from("<Q", body, 0)[0]
                text = zlib.decompress(body[8:])
            except (struct.error, zlib.error) as e:
                raise ModelError(f"{where}: the zlib-compressed tokenizer.json is corrupt ({e})") from e
            if len(text) != size:
                raise ModelError(f"{where}: tokenizer.json is {len(text)} bytes, the section says {size}")
            tokenizer = load_tokenizer(text, where)
        elif kind == schema.AnySectionDataType.LlmMetadataProto and metadata is None:
            metadata = llm_metadata_pb2.LlmMetadata()
            try:
                metadata.ParseFromString(body)
            except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
                raise ModelError(f"{where}: not an LlmMetadata proto ({e})") from e
    if model is None:
        raise ModelError(f"{source}: no TFLiteModel section of model_type tf_lite_prefill_decode "
                         f"(sections: {', '.join(listed) or 'none'})")
    if tokenizer is None:
        raise ModelError(f"{source}: no tokenizer section (SP_Tokenizer or HF_Tokenizer_Zlib; sections: "
                         f"{', '.join(listed)})")
    bundle = Bundle(model=model, tokenizer=tokenizer, source=source, sections=listed)
    if metadata is not None:
        _apply_metadata(bundle, metadata)
    else:
        bundle.start_ids = [tokenizer.bos_id] if tokenizer.bos_id is not None else []
        bundle.stop_ids = [[tokenizer.eos_id]] if tokenizer.eos_id is not None else []
    return bundle


def _token_ids(union: Any, tokenizer: Tokenizer) -> list[int]:
    """A TokenUnion: ids, or a string the tokenizer encodes."""
    if union.HasField("token_ids"):
        return [int(t) for t in union.token_ids.ids]
    if union.HasField("token_str") and union.token_str:
        return tokenizer.encode(union.token_str)
    return []


def _apply_metadata(bundle: Bundle, md: Any) -> None:
    tok = bundle.tokenizer
    bundle.start_ids = _token_ids(md.start_token, tok) if md.HasField("start_token") else []
    bundle.stop_ids = [ids for ids in (_token_ids(s, tok) for s in md.stop_tokens) if ids]
    bundle.max_num_tokens = int(md.max_num_tokens)
    bundle.chat_template = md.jinja_prompt_template
    if md.HasField("prompt_templates"):
        for role in ("user", "model", "system"):
            if md.prompt_templates.HasField(role):
                affixes = getattr(md.prompt_templates, role)
                bundle.templates[role] = PromptTemplate(affixes.prefix, affixes.suffix)
    if md.HasField("sampler_params"):
        p = md.sampler_params
        bundle.sampler = {"top_k": int(p.k) or 1, "top_p": float(p.p) or 1.0,
                          "temperature": float(p.temperature), "seed": int(p.seed)}
    vocab = tok.vocab_size
    bad = [t for ids in [bundle.start_ids, *bundle.stop_ids] for t in ids if not 0 <= t < vocab]
    if bad:
        raise ModelError(f"{bundle.source}: LlmMetadata: start/stop token {bad[0]} is outside the tokenizer's "
                         f"vocabulary of {vocab}")


def read_task(data: bytes, source: str = "<bytes>") -> Bundle:
    """A MediaPipe `.task` LLM bundle: a zip of TF_LITE_PREFILL_DECODE (the model), TOKENIZER_MODEL (SentencePiece)
    and METADATA (MediaPipe's LlmParameters proto, whose schema is not shipped on PyPI: start/stop tokens come
    from the tokenizer's BOS/EOS)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = {info.filename: info for info in archive.infolist()}
    except Exception as e:  # noqa: BLE001 - zipfile raises BadZipFile, struct.error, ValueError, ... on a bad directory
        raise ModelError(f"{source}: .task zip: corrupt or truncated ({type(e).__name__}: {e})") from e
    for name, what in ((TASK_MODEL, "the model"), (TASK_TOKENIZER, "the tokenizer")):
        if name not in entries:
            raise ModelError(f"{source}: no {name} entry ({what}) in the .task zip; entries: {sorted(entries)}")
    contents = {}
    for name in (TASK_MODEL, TASK_TOKENIZER):
        info = entries[name]
        where = f"{source}: .task zip entry {name}"
        if info.flag_bits & 0x1:
            raise ModelError(f"{where}: encrypted (a password-protected zip); MediaPipe's .task bundles are not")
        if info.compress_type not in ZIP_METHODS:
            raise ModelError(f"{where}: compression method {info.compress_type}, not one of stored (0), deflate (8), "
                             "bzip2 (12) or lzma (14)")
        try:
            contents[name] = archive.read(info)
        except Exception as e:  # noqa: BLE001 - BadZipFile, zlib.error, LZMAError, OSError, EOFError, ... by method
            raise ModelError(f"{where}: corrupt or truncated ({type(e).__name__}: {e})") from e
    model, tok_bytes = contents[TASK_MODEL], contents[TASK_TOKENIZER]
    members = set(entries)
    if model[4:8] != b"TFL3":
        raise ModelError(f"{source}: {TASK_MODEL}: not a TFLite flatbuffer")
    tokenizer = load_tokenizer(tok_bytes, f"{source}: {TASK_TOKENIZER}")
    return Bundle(model=model, tokenizer=tokenizer, source=source, sections=sorted(members),
                  start_ids=[tokenizer.bos_id] if tokenizer.bos_id is not None else [],
                  stop_ids=[[tokenizer.eos_id]] if tokenizer.eos_id is not None else [])
