"""gpuengine.llm: a .litertlm bundle built here with litert-lm-builder (the toy decoder with its KV cache in the
[B, N, T, H] layout LiteRT-LM's runtime reads, a SentencePiece tokenizer trained on a few lines with the toy's
vocabulary of 150, LlmMetadata with start/stop tokens) driven by the Engine: the same text as LiteRT-LM's CPU engine,
the same tokens as LiteRT's Interpreter driving the signatures; the GPU decode loop equal to the host loop for the
same seed, with one 4-byte read per token and 4 steps in flight; bad bundles and prompts are clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder.litertlm_builder")

from builders import PROMPT  # noqa: E402
from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.llm import Engine, SamplerConfig  # noqa: E402
from gpuengine.llm.reference import LiteRTDecoder  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")


@pytest.fixture(scope="module")
def engine(bundle: Path) -> Engine:
    return Engine(bundle)


@pytest.fixture(scope="module")
def litert_tokens(engine: Engine) -> list[int]:
    ids = engine.create_session(apply_prompt_template=False).prompt_ids(PROMPT)
    return LiteRTDecoder(engine.bundle.model, engine.cache_length).generate(ids, 64, SamplerConfig(),
                                                                           engine.bundle.stop_tokens)


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
    with pytest.raises(ValueError, match=r"lone surrogate U\+D800 at character 4"):
        session.generate("sea \ud800")
    with pytest.raises(TypeError, match=r"SamplerConfig\.top_p must be a number, got '0\.5'"):
        session.generate("sea", 4, SamplerConfig(top_p="0.5"))
    assert session.position == 0 and session.finish_reason is None  # nothing was fed


def test_interleaved_sessions(engine: Engine) -> None:
    """Two sessions on one engine: the KV cache holds one session's tokens; the other's are written back."""
    alone = engine.create_session(apply_prompt_template=False)
    expected = [alone.generate("the sea", 6), alone.generate("the river", 6)]
    a, b = (engine.create_session(apply_prompt_template=False) for _ in range(2))
    first = a.generate("the sea", 6)
    b.generate("Rain falls", 6)
    assert [first, a.generate("the river", 6)] == expected


def test_cli_generate(bundle: Path, engine: Engine, capsys: pytest.CaptureFixture) -> None:
    from gpuengine.tools.cli import main

    assert main(["generate", str(bundle), "--prompt", PROMPT, "--max-tokens", "10", "--no-template"]) == 0
    out, err = capsys.readouterr()
    session = engine.create_session(apply_prompt_template=False)
    assert out == session.generate(PROMPT, 10) + "\n"
    assert "tokens/s" in err and "gpu loop" in err


def test_gpu_sampler_kernel_large_vocabulary() -> None:
    """The sampler kernel alone on 49,152 logits (SmolLM's vocabulary) with ties and a NaN: the token, position
    and history it writes equal the numpy sampler's, greedy and sampled, step after step; with a bitmask of allowed
    tokens (a constraint's), the numpy sampler's on logits whose other tokens are -inf."""
    import wgpu

    from gpuengine.llm.sampling import sample
    from gpuengine.lowering.kernels.sampler import HISTORY, header, source
    from gpuengine.runtime.added_dispatch import AddedDispatch, state_buffer
    from gpuengine.runtime.device import get_device

    gpu = get_device("auto")
    device = gpu.device
    vocab, steps = 49152, 4
    rng = np.random.default_rng(3)
    storage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
    logits_buffer = device.create_buffer(size=vocab * 4, usage=storage)
    tokens, position = (device.create_buffer(size=16, usage=storage) for _ in range(2))
    state = state_buffer(gpu, (HISTORY + steps) * 4)
    allowed = state_buffer(gpu, vocab // 8)
    allowed_tokens = rng.random(vocab) < 0.001  # about 49 tokens, fewer than top_k 64
    allowed_tokens[[7, 40000]] = True
    device.queue.write_buffer(allowed, 0, np.packbits(allowed_tokens, bitorder="little"))
    sampler = AddedDispatch(gpu, source(vocab), [logits_buffer, tokens, position, state, allowed])
    sampled = SamplerConfig(top_k=64, top_p=0.9, temperature=1.5, seed=5)
    for config, masked in ((SamplerConfig(), False), (SamplerConfig(top_k=40, top_p=0.95, temperature=0.7, seed=11),
                                                      False),
                           (SamplerConfig(top_k=64, top_p=1.0, temperature=1.5, seed=5), False),
                           (SamplerConfig(), True), (sampled, True)):
        device.queue.write_buffer(state, 0, header(config.seed, config.top_k, config.top_p,
                                                   0.0 if config.greedy else config.temperature, masked=masked))
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
            expected.append(sample(np.where(allowed_tokens, logits, -np.inf) if masked else logits, config, step))
        written = np.frombuffer(device.queue.read_buffer(state), np.uint32)
        assert written[0] == steps and list(written[HISTORY:HISTORY + steps]) == expected, (config, masked)
        assert not masked or allowed_tokens[expected].all()
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

