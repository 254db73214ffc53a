"""gpuengine.llm without a GPU: .litertlm / .task bundles (sections, LlmMetadata, tokenizers, templates; bad
bundles are clear errors), the cache-length and chunk arithmetic, and the host sampler against its definition
(tests/llm/test_llm.py: the Engine on the GPU against LiteRT and LiteRT-LM)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder.litertlm_builder")

from builders import PROMPT, build_bundle  # noqa: E402
from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.errors import ModelError  # noqa: E402
from gpuengine.llm import Engine, SamplerConfig, open_bundle  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")


def test_bundle_sections(bundle: Path) -> None:
    b = open_bundle(bundle)
    assert b.tokenizer.kind == "sentencepiece" and b.tokenizer.vocab_size == 150
    assert b.start_ids == [1] and b.stop_ids == [[2]] and b.max_num_tokens == 100
    assert {"TFLiteModel", "SP_Tokenizer", "LlmMetadataProto"} <= set(b.sections)
    assert b.model == (bundle.parent / "toy_bnth.tflite").read_bytes()


def test_cache_length_layouts() -> None:
    from gpuengine.llm.engine import _cache_length, chunk_plan

    assert _cache_length((1, 256, 3, 64), (1, 256, 3, 64), 32) == 256  # BTNH (smollm_4l_int8)
    assert _cache_length((1, 4, 100, 4), (1, 4, 100, 4), 100) == 100  # BNTH
    assert _cache_length((1, 3, 64, 256), (1, 3, 256, 64), 32) == 256  # transposed K
    assert chunk_plan(70, 0, [32], 256) == [(32, 32), (32, 32), (32, 6)]
    assert chunk_plan(5, 98, [100], 100) == [(0, 1)] * 5  # a prefill past the cache's end: through decode


def test_bad_bundles(bundle: Path, tmp_path: Path) -> None:
    data = bundle.read_bytes()
    cases = {"truncated.litertlm": (data[:len(data) // 2], "section .*outside the file"),
             "header.litertlm": (data[:40], "header: ends at byte"),
             "magic.litertlm": (b"LITERTLX" + data[8:], "preamble: not a LiteRT-LM bundle"),
             "garbage.litertlm": (data[:32] + bytes(range(256)) * 64, "header|section"),
             "zip.task": (b"PK\x03\x04" + b"\0" * 64, r"\.task zip: corrupt")}
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ModelError, match=message):
            open_bundle(path)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("TF_LITE_PREFILL_DECODE", TOY.read_bytes())
    (tmp_path / "notok.task").write_bytes(archive.getvalue())
    with pytest.raises(ModelError, match="no TOKENIZER_MODEL"):
        open_bundle(tmp_path / "notok.task")
    with pytest.raises(ValueError, match="bare .tflite model: give its tokenizer too \\(--tokenizer FILE"):
        open_bundle(TOY)


def test_stop_token_outside_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="LlmMetadata: start/stop token 500"):
        open_bundle(build_bundle(tmp_path, TOY, stop=500))


def test_task_bundle(bundle: Path, tmp_path: Path) -> None:
    b = open_bundle(bundle)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("TF_LITE_PREFILL_DECODE", b.model)
        z.writestr("TOKENIZER_MODEL", (bundle.parent / "tokenizer.model").read_bytes())
    (tmp_path / "toy.task").write_bytes(archive.getvalue())
    task = open_bundle(tmp_path / "toy.task")
    assert task.model == b.model and task.start_ids == [1] and task.stop_ids == [[2]]
    assert task.tokenizer.encode(PROMPT) == b.tokenizer.encode(PROMPT)


def test_hf_tokenizer_templates_and_bare_tflite(bundle: Path, tmp_path: Path) -> None:
    from gpuengine.llm.bundle import prompt_tokens

    hf = open_bundle(build_bundle(tmp_path, TOY, templates=True, hf=True))
    assert hf.tokenizer.kind == "huggingface" and "HF_Tokenizer_Zlib" in hf.sections
    ids = hf.tokenizer.encode("the sea shore")
    assert ids and hf.tokenizer.decode(ids).replace(" ", "") == "theseashore"
    assert prompt_tokens(hf, "the sea", True, first=True) == [1, *hf.tokenizer.encode("user: the sea\nmodel: ")]
    assert prompt_tokens(hf, "the sea", False, first=False) == hf.tokenizer.encode("the sea")
    bare = open_bundle(TOY, tokenizer=bundle.parent / "tokenizer.model")
    assert bare.start_ids == [1] and bare.stop_ids == [[2]] and bare.tokenizer.vocab_size == 150


def test_host_sampler_matches_definition() -> None:
    from gpuengine.llm.sampling import sample, uniform

    logits = np.array([0.5, 2.0, 2.0, -1.0, np.nan, 1.0], np.float32)
    assert sample(logits, SamplerConfig(), 0) == 1  # ties: the lower id
    assert 0.0 <= uniform(7, 3) < 1.0 and uniform(7, 3) != uniform(7, 4)
    picks = {sample(logits, SamplerConfig(top_k=3, temperature=1.0, seed=s), 0) for s in range(40)}
    assert picks == {1, 2, 5}  # top-3 only, each reachable
    assert {sample(logits, SamplerConfig(top_k=3, top_p=0.5, temperature=1.0, seed=s), 0)
            for s in range(40)} == {1, 2}  # top-p keeps the two most likely


def test_model_without_decode_signature(tmp_path: Path) -> None:
    from gpuengine import zoo

    (tmp_path / "tiny.tflite").write_bytes(zoo.get("tiny"))
    with pytest.raises(ModelError, match="TFLiteModel section: no `decode` signature"):
        Engine(build_bundle(tmp_path, tmp_path / "tiny.tflite"))


def test_corrupt_model_section(tmp_path: Path) -> None:
    (tmp_path / "bad.tflite").write_bytes(b"\x18\x00\x00\x00TFL3" + bytes(range(200)))
    with pytest.raises(ModelError, match="TFLiteModel section"):
        Engine(build_bundle(tmp_path, tmp_path / "bad.tflite"))
    (tmp_path / "notflite.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match=r"section \d \(TFLiteModel\): not a TFLite flatbuffer"):
        open_bundle(build_bundle(tmp_path, tmp_path / "notflite.bin"))
