"""gpuengine.llm: a .litertlm bundle built here with litert-lm-builder (the toy decoder with its KV cache in the
[B, N, T, H] layout LiteRT-LM's runtime reads, a SentencePiece tokenizer trained on a few lines with the toy's
vocabulary of 150, LlmMetadata with start/stop tokens) driven by the Engine: the same text as LiteRT-LM's CPU engine,
the same tokens as LiteRT's Interpreter driving the signatures; the GPU decode loop equal to the host loop for the
same seed, with one 4-byte read per token and 4 steps in flight; bad bundles and prompts are clear errors."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert.interpreter")
spm = pytest.importorskip("sentencepiece")
builder = pytest.importorskip("litert_lm_builder.litertlm_builder")

from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.errors import ModelError  # noqa: E402
from gpuengine.llm import Engine, SamplerConfig, open_bundle  # noqa: E402
from gpuengine.llm.reference import LiteRTDecoder  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")

TEXT = """The quick brown fox jumps over the lazy dog.
A language model reads tokens and writes tokens.
The GPU runs the decode loop while the host streams text.
Small models are good for tests because they compile quickly.
Once upon a time there was a little engine that could.
Rain falls on the green hills and the river runs to the sea.
She sells sea shells by the sea shore every summer morning.
Numbers like one two three four five six seven eight nine ten."""
PROMPT = "The quick brown fox"


def bnth_cache(data: bytes) -> bytes:
    """The decoder with its KV-cache inputs and outputs in [B, N, T, H] (a TRANSPOSE at the signature boundary):
    LiteRT-LM 0.18.1 reads the cache length from dimension 2 of the cache, the number of heads in litert-torch's
    default [B, T, N, H] layout, so it runs the toy decoder only this way."""
    from tflite.BuiltinOperator import BuiltinOperator

    from gpuengine.model.builder import write_model
    from gpuengine.model.ir import Op, Tensor
    from gpuengine.model.reader import read_model

    model = read_model(data)
    for sig in model.signatures:
        g = model.subgraphs[sig.subgraph]
        perm = len(g.tensors)
        g.tensors.append(Tensor(index=perm, name="bnth_perm", shape=(4,), dtype=np.dtype(np.int32),
                                data=np.array([0, 2, 1, 3], np.int32)))
        first, last = [], []
        for names, is_input in ((sig.inputs, True), (sig.outputs, False)):
            for name in sorted(n for n in names if n.startswith("kv_cache_")):
                t = names[name]
                old = g.tensors[t]
                new = len(g.tensors)
                b, positions, heads, width = old.shape
                g.tensors.append(Tensor(index=new, name=f"{old.name}_bnth", shape=(b, heads, positions, width),
                                        dtype=old.dtype))
                edge = [new, perm] if is_input else [t, perm]
                op = Op(index=0, code="TRANSPOSE", inputs=edge, outputs=[t] if is_input else [new],
                        builtin_code=BuiltinOperator.TRANSPOSE)
                (first if is_input else last).append(op)
                if is_input:
                    g.inputs = [new if x == t else x for x in g.inputs]
                else:
                    g.outputs = [new if x == t else x for x in g.outputs]
                names[name] = new
        g.ops = first + g.ops + last
        for k, op in enumerate(g.ops):
            op.index = k
    return write_model(model)


def build_bundle(directory: Path, model: Path, stop: int | None = None, max_tokens: int = 100,
                 templates: bool = False, hf: bool = False) -> Path:
    """A .litertlm of `model`, a 150-piece SentencePiece tokenizer and LlmMetadata, with litert-lm-builder."""
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT.splitlines() * 4), model_writer=proto,
                                   vocab_size=150, model_type="bpe", character_coverage=1.0, minloglevel=2)
    tok = directory / "tokenizer.model"
    tok.write_bytes(proto.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    md = llm_metadata_pb2.LlmMetadata()
    md.start_token.token_ids.ids.append(sp.bos_id())
    md.stop_tokens.add().token_ids.ids.append(sp.eos_id() if stop is None else stop)
    md.max_num_tokens = max_tokens
    if templates:
        md.prompt_templates.user.prefix, md.prompt_templates.user.suffix = "user: ", "\n"
        md.prompt_templates.model.prefix = "model: "
    meta = directory / "metadata.pb"
    meta.write_bytes(md.SerializeToString())
    b = builder.LitertLmFileBuilder()
    b.add_llm_metadata(str(meta))
    if hf:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        hf_tok = Tokenizer(models.BPE(unk_token="<unk>"))
        hf_tok.pre_tokenizer = pre_tokenizers.Whitespace()
        hf_tok.train_from_iterator(TEXT.splitlines(), trainers.BpeTrainer(
            vocab_size=140, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
        hf_tok.save(str(directory / "tokenizer.json"))
        b.add_hf_tokenizer(str(directory / "tokenizer.json"))
    else:
        b.add_sentencepiece_tokenizer(str(tok))
    b.add_tflite_model(str(model), builder.TfLiteModelType.PREFILL_DECODE)
    out = directory / "toy.litertlm"
    with open(out, "wb") as f:
        b.build(f)
    return out


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("llm")
    (directory / "toy_bnth.tflite").write_bytes(bnth_cache(TOY.read_bytes()))
    return build_bundle(directory, directory / "toy_bnth.tflite")


@pytest.fixture(scope="module")
def engine(bundle: Path) -> Engine:
    return Engine(bundle)


@pytest.fixture(scope="module")
def litert_tokens(engine: Engine) -> list[int]:
    ids = engine.create_session(apply_prompt_template=False).prompt_ids(PROMPT)
    return LiteRTDecoder(engine.bundle.model, engine.cache_length).generate(ids, 64, SamplerConfig(),
                                                                           engine.bundle.stop_tokens)


def test_bundle_sections(bundle: Path) -> None:
    b = open_bundle(bundle)
    assert b.tokenizer.kind == "sentencepiece" and b.tokenizer.vocab_size == 150
    assert b.start_ids == [1] and b.stop_ids == [[2]] and b.max_num_tokens == 100
    assert {"TFLiteModel", "SP_Tokenizer", "LlmMetadataProto"} <= set(b.sections)
    assert b.model == (bundle.parent / "toy_bnth.tflite").read_bytes()


@pytest.mark.fp32_only("greedy tokens compared with LiteRT's float32 decode")
def test_greedy_64_tokens_equal_litert(engine: Engine, litert_tokens: list[int]) -> None:
    """GPU loop, host loop and LiteRT's Interpreter (CPU, cache through the host): the same 64 greedy tokens."""
    assert engine.loop == "gpu", engine.gpu_loop_reason
    for loop in ("gpu", "host"):
        session = engine.create_session(apply_prompt_template=False, loop=loop)
        ours = list(session.generate_tokens(session.prompt_ids(PROMPT), 64))
        assert ours == litert_tokens, loop
    assert len(litert_tokens) == 64 or litert_tokens[-1] in engine.bundle.stop_tokens


@pytest.mark.fp32_only("greedy tokens compared with LiteRT's float32 decode")
def test_gpu_loop_round_trips(engine: Engine, litert_tokens: list[int]) -> None:
    """A decode step reads back its 4-byte token id and nothing else, uploads nothing, 4 steps in flight."""
    session = engine.create_session(apply_prompt_template=False, loop="gpu")
    tokens = list(session.generate_tokens(session.prompt_ids(PROMPT), 16))
    stats = engine.stats
    assert tokens == litert_tokens[:16]
    assert stats.reads == 16 and stats.bytes_read == 16 * 4 and stats.uploads == 0
    assert stats.max_in_flight >= 4 and stats.steps >= 16
    assert engine.decode.compiled.programs[0].uploaded == {}  # token and position were written on the GPU
    session = engine.create_session(apply_prompt_template=False, loop="host")
    list(session.generate_tokens(session.prompt_ids(PROMPT), 4))
    assert engine.stats.bytes_read == 4 * engine.vocab * 4 and engine.stats.max_in_flight == 1


@pytest.mark.parametrize("seed", [7, 123])
def test_sampled_gpu_equals_host(engine: Engine, seed: int) -> None:
    config = SamplerConfig(top_k=8, top_p=0.9, temperature=0.8, seed=seed)
    runs = {}
    for loop in ("gpu", "host"):
        session = engine.create_session(apply_prompt_template=False, loop=loop, sampler_config=config)
        runs[loop] = list(session.generate_tokens(session.prompt_ids(PROMPT), 12))
    assert runs["gpu"] == runs["host"]
    greedy = engine.create_session(apply_prompt_template=False)
    assert runs["gpu"] != list(greedy.generate_tokens(greedy.prompt_ids(PROMPT), 12))  # it does sample


@pytest.mark.fp32_only("greedy tokens compared with LiteRT's float32 decode")
def test_session_keeps_cache_across_turns(engine: Engine) -> None:
    session = engine.create_session(apply_prompt_template=False)
    first = list(session.generate_tokens(session.prompt_ids(PROMPT), 8))
    position, steps = session.position, session.steps
    second_ids = session.prompt_ids("the sea")
    assert second_ids[0] != 1  # no start token after the first turn
    second = list(session.generate_tokens(second_ids, 8))
    ref = LiteRTDecoder(engine.bundle.model, engine.cache_length)
    assert ref.generate(engine.create_session(apply_prompt_template=False).prompt_ids(PROMPT), 8) == first
    assert ref.generate([first[-1], *second_ids], 8, start=position, step0=steps) == second
    assert session.position == position + 1 + len(second_ids) + len(second) - 1


def test_stop_sequence_of_two_tokens(engine: Engine, litert_tokens: list[int],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine.bundle, "stop_ids", [[2], litert_tokens[3:5]])
    session = engine.create_session(apply_prompt_template=False)
    assert list(session.generate_tokens(session.prompt_ids(PROMPT), 32)) == litert_tokens[:5]


def test_stream_is_the_text(engine: Engine) -> None:
    session = engine.create_session(apply_prompt_template=False)
    fed = len(session.prompt_ids(PROMPT))
    pieces = list(session.generate_stream(PROMPT, 12))
    tokens = session.history[fed:]
    assert "".join(pieces) == engine.tokenizer.decode([t for t in tokens if t not in engine.bundle.stop_tokens])
    assert len(pieces) > 1


@pytest.mark.fp32_only("greedy text compared with LiteRT-LM's float32 CPU engine")
def test_greedy_64_tokens_equal_litert_lm(engine: Engine, bundle: Path) -> None:
    """LiteRT-LM's own CPU engine (litert-lm-api, top-k 1, apply_prompt_template=False) on the same bundle: the same
    text as gpuengine's GPU loop."""
    litert_lm = pytest.importorskip("litert_lm")
    lm = litert_lm.Engine(str(bundle), backend=litert_lm.Backend.CPU())
    try:
        session = lm.create_session(apply_prompt_template=False, max_output_tokens=64,
                                    sampler_config=litert_lm.SamplerConfig(top_k=1, seed=0))
        session.run_prefill([PROMPT])
        theirs = session.run_decode().texts[0]
        session.close()
    finally:
        lm.close()
    ours = engine.create_session(apply_prompt_template=False).generate(PROMPT, 64)
    assert engine.stats.loop == "gpu" and len(ours) > 64
    assert ours == theirs


def test_cache_length_layouts() -> None:
    from gpuengine.llm.engine import _cache_length, chunk_plan

    assert _cache_length((1, 256, 3, 64), (1, 256, 3, 64), 32) == 256  # BTNH (smollm_4l_int8)
    assert _cache_length((1, 4, 100, 4), (1, 4, 100, 4), 100) == 100  # BNTH
    assert _cache_length((1, 3, 64, 256), (1, 3, 256, 64), 32) == 256  # transposed K
    assert chunk_plan(70, 0, [32], 256) == [(32, 32), (32, 32), (32, 6)]
    assert chunk_plan(5, 98, [100], 100) == [(0, 1)] * 5  # a prefill past the cache's end: through decode


def test_no_template_feeds_start_token(engine: Engine, bundle: Path) -> None:
    """apply_prompt_template=False: the start token, then the prompt's tokens (what LiteRT-LM's session feeds)."""
    ids = engine.create_session(apply_prompt_template=False).prompt_ids(PROMPT)
    assert ids == [1, *engine.tokenizer.encode(PROMPT)]
    litert_lm = pytest.importorskip("litert_lm")
    lm = litert_lm.Engine(str(bundle), backend=litert_lm.Backend.CPU())
    try:
        assert [lm.bos_token_id, *lm.tokenize(PROMPT)] == ids and lm.eos_token_ids == [[2]]
    finally:
        lm.close()


def test_bad_prompts(engine: Engine) -> None:
    session = engine.create_session(apply_prompt_template=False)
    with pytest.raises(ValueError, match="empty"):
        session.generate("")
    with pytest.raises(ValueError, match="does not fit the KV cache of 100"):
        session.generate("sea " * 200)
    with pytest.raises(ValueError, match=r"token id 150 is outside the vocabulary \[0, 149\]"):
        session.generate_tokens([3, 150], 4)
    with pytest.raises(ValueError, match="max_tokens"):
        session.generate_tokens([3], 0)
    with pytest.raises(ValueError, match="top_k"):
        SamplerConfig(top_k=0)
    assert session.position == 0  # nothing was fed


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
    with pytest.raises(ValueError, match="tokenizer file"):
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


def test_interleaved_sessions(engine: Engine) -> None:
    """Two sessions on one engine: the KV cache holds one session's tokens; the other's are written back."""
    alone = engine.create_session(apply_prompt_template=False)
    expected = [alone.generate("the sea", 6), alone.generate("the river", 6)]
    a, b = (engine.create_session(apply_prompt_template=False) for _ in range(2))
    first = a.generate("the sea", 6)
    b.generate("Rain falls", 6)
    assert [first, a.generate("the river", 6)] == expected


def test_host_sampler_matches_definition() -> None:
    from gpuengine.llm.sampling import sample, uniform

    logits = np.array([0.5, 2.0, 2.0, -1.0, np.nan, 1.0], np.float32)
    assert sample(logits, SamplerConfig(), 0) == 1  # ties: the lower id
    assert 0.0 <= uniform(7, 3) < 1.0 and uniform(7, 3) != uniform(7, 4)
    picks = {sample(logits, SamplerConfig(top_k=3, temperature=1.0, seed=s), 0) for s in range(40)}
    assert picks == {1, 2, 5}  # top-3 only, each reachable
    assert {sample(logits, SamplerConfig(top_k=3, top_p=0.5, temperature=1.0, seed=s), 0)
            for s in range(40)} == {1, 2}  # top-p keeps the two most likely


def test_cli_generate(bundle: Path, engine: Engine, capsys: pytest.CaptureFixture) -> None:
    from gpuengine.tools.cli import main

    assert main(["generate", str(bundle), "--prompt", PROMPT, "--max-tokens", "10", "--no-template"]) == 0
    out, err = capsys.readouterr()
    session = engine.create_session(apply_prompt_template=False)
    assert out == session.generate(PROMPT, 10) + "\n"
    assert "tokens/s" in err and "gpu loop" in err


def test_gpu_sampler_kernel_large_vocabulary() -> None:
    """The sampler kernel alone on 49,152 logits (SmolLM's vocabulary) with ties and a NaN: the token, position
    and history it writes equal the numpy sampler's, greedy and sampled, step after step."""
    import wgpu

    from gpuengine import get_device
    from gpuengine.kernels.sampler import HISTORY, GpuSampler
    from gpuengine.llm.sampling import sample

    device = get_device()
    vocab, steps = 49152, 4
    rng = np.random.default_rng(3)
    storage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
    logits_buffer = device.create_buffer(size=vocab * 4, usage=storage)
    tokens, position = (device.create_buffer(size=16, usage=storage) for _ in range(2))
    sampler = GpuSampler(device, vocab, logits_buffer, tokens, position, steps)
    for config in (SamplerConfig(), SamplerConfig(top_k=40, top_p=0.95, temperature=0.7, seed=11),
                   SamplerConfig(top_k=64, top_p=1.0, temperature=1.5, seed=5)):
        sampler.reset(config.seed, config.top_k, config.top_p, 0.0 if config.greedy else config.temperature)
        device.queue.write_buffer(position, 0, np.array([10], np.float32))
        expected = []
        for step in range(steps):
            logits = (rng.standard_normal(vocab) * 3).astype(np.float32)
            logits[[7, 900, 40000]] = logits.max() + 1  # a three-way tie for the top
            logits[123] = np.nan
            device.queue.write_buffer(logits_buffer, 0, logits)
            encoder = device.create_command_encoder()
            sampler.record(encoder)
            device.queue.submit([encoder.finish()])
            expected.append(sample(logits, config, step))
        state = np.frombuffer(device.queue.read_buffer(sampler.state), np.uint32)
        assert state[0] == steps and list(state[HISTORY:HISTORY + steps]) == expected, config
        assert np.frombuffer(device.queue.read_buffer(tokens), np.float32)[0] == expected[-1]
        assert np.frombuffer(device.queue.read_buffer(position), np.float32)[0] == 10 + steps


def test_cli_bench_llm(bundle: Path, engine: Engine, capsys: pytest.CaptureFixture) -> None:
    import json

    from gpuengine.tools.cli import main

    assert main(["bench", str(bundle), "--llm", "--runs", "1", "--prompt-tokens", "4", "--decode-tokens", "4",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gpu_memory_bytes"] > 0 and report["cache_length"] == 100 and report["prefill_signatures"] == [100]
    for key in ("gpuengine_gpu_loop", "gpuengine_host_loop", "litert_cpu_interpreter"):
        run = report["runs"][key]
        assert run["prefill_tokens"] == 4 and run["decode_tokens"] == 3 and run["decode_tokens_per_s"] > 0, key
    assert {"litert_lm_cpu", "litert_lm_gpu"} <= set(report["runs"])  # figures, or the reason it could not run


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
