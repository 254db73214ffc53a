"""Bad input to the language-model layer without a GPU: every malformed .task zip, .litertlm or tokenizer file is a
ModelError naming the part; text a tokenizer cannot take a ValueError naming the character; sampler settings
type-checked; a tokenizer that does not match the model's vocabulary refused at load; the CLI (`generate`,
`bench --llm`) says each in one line and exits 2 before compiling anything (the unit tier's guard refuses GPU work,
so a command that compiled would fail here). Also the zoo bundle and `python -m gpuengine.llm.tokenizer`."""

from __future__ import annotations

import io
import math
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder.litertlm_builder")

from builders import build_bundle  # noqa: E402
from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.errors import ModelError  # noqa: E402
from gpuengine.llm import Engine, SamplerConfig, open_bundle  # noqa: E402
from gpuengine.llm.tokenizer import load_tokenizer, read_tokenizer  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
needs_toy = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """cli.main's exit status and its stderr (argparse's SystemExit counted as its code)."""
    from gpuengine.tools.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


# -- sampler settings -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("field", "value", "error"), [
    ("temperature", "1.0", TypeError), ("top_p", None, TypeError), ("top_p", "0.5", TypeError),
    ("top_k", 2.0, TypeError), ("top_k", True, TypeError), ("seed", "3", TypeError),
    ("top_k", 0, ValueError), ("top_p", 0.0, ValueError), ("top_p", math.nan, ValueError),
    ("temperature", -1.0, ValueError), ("temperature", math.inf, ValueError), ("seed", -1, ValueError)])
def test_sampler_config_checks_each_field(field: str, value: object, error: type) -> None:
    with pytest.raises(error, match=rf"SamplerConfig\.{field} must be"):
        SamplerConfig(**{field: value})


def test_sampler_config_stores_numbers() -> None:
    import numpy as np

    config = SamplerConfig(top_k=np.int64(3), top_p=1, temperature=np.float32(0.5), seed=np.uint32(7))
    assert (config.top_k, config.top_p, config.temperature, config.seed) == (3, 1.0, 0.5, 7)
    assert [type(v) for v in (config.top_k, config.top_p, config.temperature, config.seed)] == [int, float, float, int]


# -- .task zips ---------------------------------------------------------------------------------------------------
def task_zip(tokenizer: bytes, model: bytes = b"\x18\0\0\0TFL3" + bytes(32), method: int = zipfile.ZIP_STORED) -> bytes:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression=method) as z:
        z.writestr("TF_LITE_PREFILL_DECODE", model)
        z.writestr("TOKENIZER_MODEL", tokenizer)
    return archive.getvalue()


def set_entry_field(data: bytes, name: bytes, offset: int, value: bytes) -> bytes:
    """Overwrite a field of `name`'s local and central headers (offset from the local header's signature; the
    central header's field is 2 bytes further on)."""
    out = bytearray(data)
    for signature, shift in ((b"PK\x03\x04", 0), (b"PK\x01\x02", 2)):
        at = 0
        while (at := out.find(signature, at)) >= 0:
            name_at = at + (30 if shift == 0 else 46)
            if out[name_at:name_at + len(name)] == name:
                out[at + offset + shift:at + offset + shift + len(value)] = value
            at += 4
    return bytes(out)


def test_task_zip_errors_name_the_entry(tmp_path: Path) -> None:
    from gpuengine.zoo.tokenizer import sentencepiece_model

    good = task_zip(sentencepiece_model(64))
    cases = {
        "encrypted": (set_entry_field(good, b"TOKENIZER_MODEL", 6, b"\x01\x00"),
                      "entry TOKENIZER_MODEL: encrypted"),
        "method": (set_entry_field(good, b"TF_LITE_PREFILL_DECODE", 8, b"\x63\x00"),
                   "entry TF_LITE_PREFILL_DECODE: compression method 99, not one of"),
        "lzma": (task_zip(b"x" * 4000, method=zipfile.ZIP_LZMA), None),
        "deflate": (task_zip(b"x" * 4000, method=zipfile.ZIP_DEFLATED), None),
        "bzip2": (task_zip(b"x" * 4000, method=zipfile.ZIP_BZIP2), None),
        "garbage tokenizer": (task_zip(b"\x01\x02not a model"), "TOKENIZER_MODEL: not a SentencePiece model"),
        "empty tokenizer": (task_zip(b""), "TOKENIZER_MODEL: empty"),
        "cut": (good[:len(good) // 2], r"\.task zip: corrupt or truncated \(BadZipFile"),
    }
    for name, (data, message) in cases.items():
        if message is None:  # the compressed tokenizer's bytes damaged: the method's decoder fails
            at = data.index(b"TOKENIZER_MODEL", data.index(b"TOKENIZER_MODEL") + 1) + 40
            data = data[:at] + bytes(b ^ 0x5A for b in data[at:at + 12]) + data[at + 12:]
            message = "entry TOKENIZER_MODEL: corrupt or truncated|TOKENIZER_MODEL: not a SentencePiece"
        path = tmp_path / f"{name.replace(' ', '_')}.task"
        path.write_bytes(data)
        with pytest.raises(ModelError, match=message):
            open_bundle(path)


@needs_toy
def test_damaged_litertlm_is_only_ever_a_model_error(bundle: Path) -> None:
    """Cut at many lengths, and bytes flipped across the header and sections: ModelError every time (or a bundle
    that still reads), never another exception."""
    data = bundle.read_bytes()
    header_end = int.from_bytes(data[24:32], "little")
    cuts = sorted({*range(0, 64, 7), *range(header_end - 40, header_end + 40, 9),
                   *range(0, len(data), len(data) // 40)})
    damaged = [data[:n] for n in cuts]
    for at in [*range(32, header_end, max(1, (header_end - 32) // 60)), *range(header_end, len(data), len(data) // 60)]:
        damaged.append(data[:at] + bytes(b ^ 0xFF for b in data[at:at + 4]) + data[at + 4:])
    path = bundle.parent / "damaged.litertlm"
    for content in damaged:
        path.write_bytes(content)
        try:
            open_bundle(path)
        except ModelError:
            pass


# -- tokenizer files ------------------------------------------------------------------------------------------------
def test_tokenizer_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"tokenizer file .*: is a directory; give the tokenizer file in it"):
        read_tokenizer(tmp_path)
    with pytest.raises(ModelError, match=r"tokenizer file .*missing\.model: no such file"):
        read_tokenizer(tmp_path / "missing.model")
    for name, content, message in (("empty.model", b"", "empty"), ("blank.json", b" \n", "empty"),
                                   ("garbage.model", b"\x00\x01garbage", "not a SentencePiece model")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ModelError, match=rf"tokenizer file .*{name}: {message}"):
            read_tokenizer(tmp_path / name)


def test_tokenizer_json_with_a_byte_order_mark_is_json(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models

    text = Tokenizer(models.WordLevel({"<unk>": 0, "sea": 1, "the": 2}, unk_token="<unk>")).to_str()
    tok = load_tokenizer(b"\xef\xbb\xbf" + text.encode(), "tokenizer.json")
    assert tok.kind == "huggingface" and tok.vocab_size == 3
    with pytest.raises(ModelError, match="tokenizer.json: not a Hugging Face tokenizer.json"):
        load_tokenizer(b"\xef\xbb\xbf{\"model\": 1}", "tokenizer.json")


def test_lone_surrogate_names_the_character() -> None:
    from gpuengine.zoo.tokenizer import sentencepiece_model

    tok = load_tokenizer(sentencepiece_model(64))
    with pytest.raises(ValueError, match=r"lone surrogate U\+D800 at character 4"):
        tok.encode("the \ud800 sea")
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models

    hf = load_tokenizer(Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).to_str().encode())
    with pytest.raises(ValueError, match=r"lone surrogate U\+DCFF at character 0"):
        hf.encode("\udcff")


@needs_toy
def test_tokenizer_must_cover_the_vocabulary(tmp_path: Path) -> None:
    """The toy's 150 logits: a tokenizer of 100 or 200 pieces is refused at load, naming the fix."""
    from gpuengine.zoo.tokenizer import sentencepiece_model

    for vocab, word in ((100, "fewer"), (200, "more")):
        (tmp_path / f"t{vocab}.model").write_bytes(sentencepiece_model(vocab))
        with pytest.raises(ModelError, match=rf"tokenizer: {vocab} tokens, {word} than the model's vocabulary of 150 "
                                             r".*--vocab 150"):
            Engine(TOY, tmp_path / f"t{vocab}.model")
    with pytest.raises(ModelError, match="start/stop token 500 is outside"):
        open_bundle(build_bundle(tmp_path, TOY, stop=500))


# -- zoo bundle and the tokenizer maker ------------------------------------------------------------------------------
def test_zoo_bundle_needs_no_files() -> None:
    from gpuengine.llm.bundle import ZOO_BUNDLES

    b = open_bundle("decoder_tiny")
    assert "decoder_tiny" in ZOO_BUNDLES and b.source == "decoder_tiny (zoo)"
    assert b.tokenizer.kind == "sentencepiece" and b.tokenizer.vocab_size == 256
    assert b.start_ids == [1] and b.stop_ids == [[2]]
    assert b.tokenizer.decode(b.tokenizer.encode("The river runs to the sea.")) == "The river runs to the sea."
    with pytest.raises(FileNotFoundError, match="no such file: decoder_huge .*nor a zoo decoder: decoder_tiny"):
        open_bundle("decoder_huge")


def test_zoo_tokenizer_is_deterministic() -> None:
    import hashlib
    import subprocess
    import sys

    from gpuengine.zoo.tokenizer import sentencepiece_model

    here = hashlib.sha256(sentencepiece_model(256)).hexdigest()
    code = ("import hashlib; from gpuengine.zoo.tokenizer import sentencepiece_model as m; "
            "print(hashlib.sha256(m(256)).hexdigest())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == here


def test_make_tokenizer_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from gpuengine.llm.make_tokenizer import main

    assert main(["--vocab", "49152", str(tmp_path / "smollm.model")]) == 0
    tok = read_tokenizer(tmp_path / "smollm.model")
    assert tok.vocab_size == 49152 and tok.bos_id == 1 and tok.eos_id == 2
    assert tok.decode([40000]) == "w40000" and 40000 not in tok.encode("the river runs to the sea")
    assert "smollm.model: a SentencePiece tokenizer of 49152 pieces" in capsys.readouterr().err
    assert main(["--vocab", "10", str(tmp_path / "small.model")]) == 2
    assert capsys.readouterr().err.strip() == "gpuengine: a tokenizer's vocabulary must be an integer >= 64, got 10"
    assert not (tmp_path / "small.model").exists()


# -- the CLI: one line, exit 2, nothing compiled -----------------------------------------------------------------------
def test_generate_bad_input_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "bad.task").write_bytes(set_entry_field(task_zip(b"x"), b"TOKENIZER_MODEL", 6, b"\x01\x00"))
    cases = [
        (["--prompt", ""], "gpuengine: --prompt is empty: give at least one character"),
        (["--prompt", "the \udcff sea"], "gpuengine: --prompt: the text has a lone surrogate U+DCFF at character 4"),
        (["--prompt", "hi", "--top-p", "2"], "gpuengine: --top-p: SamplerConfig.top_p must be in (0, 1], got 2.0"),
        (["--prompt", "hi", "--top-k", "0"], "gpuengine: --top-k: SamplerConfig.top_k must be in [1, 64], got 0"),
        (["--prompt", "hi", "--max-tokens", "0"], "gpuengine: --max-tokens must be >= 1, got 0"),
        (["--prompt", "hi", "--tokenizer", str(tmp_path)], f"gpuengine: tokenizer file {tmp_path}: is a directory"),
    ]
    for extra, message in cases:
        rc, err = run_cli(["generate", "decoder_tiny", *extra], capsys)
        assert rc == 2 and err.startswith(message) and err.count("\n") == 1, (extra, err)
    rc, err = run_cli(["generate", str(tmp_path / "nothing.litertlm"), "--prompt", "hi"], capsys)
    assert rc == 2 and err.startswith("gpuengine: no such file:") and err.count("\n") == 1
    rc, err = run_cli(["generate", str(tmp_path / "bad.task"), "--prompt", "hi"], capsys)
    assert rc == 2 and "entry TOKENIZER_MODEL: encrypted" in err and err.count("\n") == 1
    rc, err = run_cli(["bench", "decoder_tiny", "--llm", "--prompt-tokens", "0"], capsys)
    assert rc == 2 and err == "gpuengine: --prompt-tokens must be >= 1, got 0\n"
    rc, err = run_cli(["bench", str(tmp_path), "--llm"], capsys)
    assert rc == 2 and err.startswith("gpuengine: ") and "is a directory" in err and err.count("\n") == 1


@needs_toy
def test_generate_bare_tflite_names_the_flag(capsys: pytest.CaptureFixture) -> None:
    rc, err = run_cli(["generate", str(TOY), "--prompt", "hi"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "give its tokenizer too (--tokenizer FILE" in err and "python -m gpuengine.llm.make_tokenizer --vocab" in err
