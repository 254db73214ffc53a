"""Many sessions on one Engine: each owns its KV cache on the GPU and its bind groups (made at its creation), so
generators of several sessions stepped in any order give each session exactly the tokens it gets alone (greedy and
seeded, GPU and host loops, the toy decoder and the zoo decoder, a cache written in place or not); an abandoned or
closed stream releases cleanly; clone() copies a session's cache on the GPU (the prefix is prefilled once);
memory_bytes() / close() account and free it."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("litert_lm_builder.litertlm_builder")

from helpers import SHARED_MODELS  # noqa: E402

from gpuengine.llm import Engine, SamplerConfig, Session  # noqa: E402

TOY = SHARED_MODELS / "toy_decoder_kv.tflite"
pytestmark = pytest.mark.skipif(not TOY.is_file(), reason=f"shared model {TOY.name} not found")

SEEDED = SamplerConfig(top_k=8, top_p=0.9, temperature=0.8, seed=5)
TURNS = {"a": ["the sea", "the river"], "b": ["Rain falls", "on the hill"], "c": ["green world"]}


@pytest.fixture(scope="module")
def engine(bundle: Path) -> Engine:
    return Engine(bundle)


def new(engine: Engine, loop: str, config: SamplerConfig) -> Session:
    return engine.create_session(apply_prompt_template=False, loop=loop, sampler_config=config)


def reply(session: Session, prompt: str, max_tokens: int = 10) -> Iterator[int]:
    return session.generate_tokens(session.prompt_ids(prompt), max_tokens)


def alone(engine: Engine, loop: str, config: SamplerConfig) -> dict[str, list[list[int]]]:
    """Each session's turns run to the end, one session after the other."""
    out = {}
    for name, prompts in TURNS.items():
        session = new(engine, loop, config)
        out[name] = [list(reply(session, p)) for p in prompts]
        session.close()
    return out


def interleaved(engine: Engine, loop: str, config: SamplerConfig, pattern: list[str]) -> dict[str, list[list[int]]]:
    """The same turns, one token at a time from the session `pattern` names in turn (cycled), a session's next
    turn starting when its reply ends, while the others' replies are mid-stream."""
    sessions = {name: new(engine, loop, config) for name in TURNS}
    turn = dict.fromkeys(TURNS, 0)
    out: dict[str, list[list[int]]] = {name: [] for name in TURNS}
    streams: dict[str, Iterator[int] | None] = dict.fromkeys(TURNS)
    k = 0
    while any(turn[n] < len(TURNS[n]) for n in TURNS):
        name = pattern[k % len(pattern)]
        k += 1
        if turn[name] >= len(TURNS[name]):
            continue
        if streams[name] is None:
            streams[name] = reply(sessions[name], TURNS[name][turn[name]])
            out[name].append([])
        token = next(streams[name], None)
        if token is None:
            streams[name] = None
            turn[name] += 1
        else:
            out[name][-1].append(token)
    for session in sessions.values():
        session.close()
    return out


@pytest.mark.parametrize(("loop", "config"), [("gpu", SamplerConfig()), ("gpu", SEEDED), ("host", SamplerConfig()),
                                              ("host", SEEDED)], ids=["gpu-greedy", "gpu-seeded", "host-greedy",
                                                                      "host-seeded"])
def test_interleaved_streams_equal_each_alone(engine: Engine, loop: str, config: SamplerConfig) -> None:
    expected = alone(engine, loop, config)
    assert expected["a"] != expected["b"]  # distinct replies: a mix-up could not pass unseen
    for pattern in (["a", "b", "c"], ["a", "a", "b", "c", "c", "c", "b"]):
        switches, copied = engine.switches, engine.swap_bytes
        assert interleaved(engine, loop, config, pattern) == expected, pattern
        assert engine.switches - switches > 10  # the sessions did take turns on the GPU
        assert engine.swap_bytes == copied  # each step binds its session's own cache: a switch copies nothing


def test_issue_example_stream_texts(engine: Engine) -> None:
    """The issue's case: two generate_stream generators stepped in turn; each text is its session's alone."""
    expected = [new(engine, "gpu", SamplerConfig()).generate(p, 8) for p in ("the sea", "Rain falls")]
    a, b = (new(engine, "gpu", SamplerConfig()) for _ in range(2))
    pairs = zip_longest(a.generate_stream("the sea", 8), b.generate_stream("Rain falls", 8), fillvalue="")
    texts = ["".join(column) for column in zip(*pairs, strict=True)]
    assert texts == expected and expected[0] != expected[1]


def test_abandoned_and_closed_streams_release_cleanly(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream dropped mid-reply (GC) or closed: no map left pending, nothing raised at collection, and the
    session's next reply is the one it gives after a reply of the same length read to the end."""
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: raised.append(info))
    reference = new(engine, "gpu", SamplerConfig())
    list(reply(reference, "the sea", 3))
    expected = list(reply(reference, "the river"))
    for how in ("drop", "close"):
        session = new(engine, "gpu", SamplerConfig())
        other = new(engine, "gpu", SamplerConfig())
        stream, other_stream = reply(session, "the sea", 40), reply(other, "Rain falls", 40)
        got = [next(stream), next(other_stream), next(stream), next(stream)]
        assert session.generating
        if how == "drop":
            del stream
            gc.collect()
        else:
            stream.close()
        next(other_stream)  # the other stream goes on, its staging ring its own
        other_stream.close()
        assert not session.generating and len(got) == 4
        assert list(reply(session, "the river")) == expected, how
    assert raised == []


def test_one_reply_at_a_time_per_session(engine: Engine) -> None:
    session = new(engine, "gpu", SamplerConfig())
    first = reply(session, "the sea")
    next(first)
    with pytest.raises(RuntimeError, match="already generating"):
        next(reply(session, "the river"))
    with pytest.raises(RuntimeError, match="generating a reply"):
        session.clone()
    first.close()
    assert len(list(reply(session, "the river"))) > 0


@pytest.mark.parametrize("loop", ["gpu", "host"])
def test_clone_copies_the_cache_on_the_gpu(engine: Engine, monkeypatch: pytest.MonkeyPatch, loop: str) -> None:
    """A prefix prefilled once, cloned: each clone continues as a session that ran the prefix itself, and only
    the continuation's tokens are prefilled; clone and source stay independent."""
    prefix = new(engine, loop, SEEDED)
    shared = list(reply(prefix, "the sea", 4))
    expected = []
    for prompt in ("the river", "Rain falls"):
        solo = new(engine, loop, SEEDED)
        assert list(reply(solo, "the sea", 4)) == shared
        expected.append(list(reply(solo, prompt)))
        solo.close()
    prefilled = []
    original = engine.prefill

    def counted(session: Session, ids: list[int], start: int) -> None:
        prefilled.append(len(ids))
        original(session, ids, start)

    monkeypatch.setattr(engine, "prefill", counted)
    twin = prefix.clone()
    assert twin.history == prefix.history and twin.position == prefix.position
    got = [list(reply(twin, "the river")), list(reply(prefix, "Rain falls"))]
    monkeypatch.undo()
    assert got == expected
    # the pending token (the prefix's last reply token) and the new prompt: the prefix is not prefilled again
    assert prefilled == [len(prefix.prompt_ids("the river")), len(prefix.prompt_ids("Rain falls"))]
    twin2 = twin.clone()  # a clone of an inactive session (its cache saved in its own buffers)
    new(engine, loop, SEEDED).generate("green world", 4)
    assert list(reply(twin2, "on the hill")) == list(reply(twin, "on the hill"))


def test_memory_accounting_and_close(engine: Engine) -> None:
    before = engine.sessions_memory_bytes()
    cache = sum(int(b.size) for b in engine.cache_buffers().values())
    session = new(engine, "gpu", SamplerConfig())
    host = new(engine, "host", SamplerConfig())
    assert session.memory_bytes() == engine.session_memory_bytes("gpu") > cache > 0
    assert host.memory_bytes() == engine.session_memory_bytes("host") == cache
    assert engine.sessions_memory_bytes() == before + session.memory_bytes() + host.memory_bytes()
    stream = reply(session, "the sea", 40)
    next(stream)
    session.close()
    assert session.closed and session.memory_bytes() == 0 and engine.owner is not session
    assert next(stream, None) is None  # an open stream of a closed session ends
    assert engine.sessions_memory_bytes() == before + host.memory_bytes()
    with pytest.raises(RuntimeError, match="closed"):
        session.generate("the sea")
    with pytest.raises(RuntimeError, match="closed"):
        session.clone()
    session.close()  # idempotent
    with host:
        assert len(host.generate("the sea", 4)) > 0
    assert host.closed
    assert engine.sessions_memory_bytes() == before


def test_zoo_decoder_interleaved_equals_alone() -> None:
    """The zoo decoder (hybrid int8, a 32-position cache): two greedy GPU-loop sessions stepped in turn."""
    engine = Engine("decoder_tiny")
    config = SamplerConfig()
    prompts = ["The river runs", "A small boat"]
    expected = []
    for prompt in prompts:
        session = new(engine, "gpu", config)
        expected.append(list(reply(session, prompt, 12)))
    sessions = [new(engine, "gpu", config) for _ in prompts]
    streams = [reply(s, p, 12) for s, p in zip(sessions, prompts, strict=True)]
    got: list[list[int]] = [[], []]
    for _ in range(12):
        for k, stream in enumerate(streams):
            token = next(stream, None)
            if token is not None:
                got[k].append(token)
    assert got == expected and expected[0] != expected[1]
    # sessions made and closed leave no GPU buffer behind (a session's bind groups bind the program's constants)
    import wgpu

    def buffers() -> int:
        gc.collect()
        return wgpu.diagnostics.object_counts.get_dict()["Buffer"]["count"]

    for session in sessions:
        session.close()
    before = buffers()
    for prompt in prompts * 3:
        with new(engine, "gpu", config) as session:
            list(reply(session, prompt, 2))
    assert buffers() == before


def test_cache_not_written_in_place(bundle: Path) -> None:
    """Without the graph passes the cache is not written in place: a session's cache is bound as the input and the
    output copied back into it in the step's own submission; two streams stepped in turn still equal each alone."""
    engine = Engine(bundle, optimize=False)
    assert engine.kv_on_gpu and engine.copied_back[0] and engine.loop == "gpu"
    prompts = ["the sea", "Rain falls"]
    expected = [list(reply(new(engine, "gpu", SEEDED), p, 6)) for p in prompts]
    switches = engine.switches
    streams = [reply(new(engine, "gpu", SEEDED), p, 6) for p in prompts]
    got = [list(pair) for pair in zip(*streams, strict=True)]
    assert [[pair[k] for pair in got] for k in range(2)] == expected and expected[0] != expected[1]
    assert engine.switches - switches > 3 and engine.swap_bytes == 0  # they took turns; nothing was copied


def test_bound_buffers_checked_before_submit(engine: Engine) -> None:
    """GpuProgram.bind_buffers refuses what WebGPU would reject at submit: a buffer too small, one without STORAGE
    usage, one buffer for two tensors, a tensor that is not the program's."""
    import wgpu

    program = engine.decode_program
    inputs = engine.inputs_of[0]
    name = engine.cache_names[0]
    size = int(engine.cache_buffers()[name].size)
    device = engine.gpu.device
    storage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
    with pytest.raises(ValueError, match="bytes, less than"):
        program.bind_buffers({inputs[name]: device.create_buffer(size=size - 16, usage=storage)})
    with pytest.raises(ValueError, match="STORAGE"):
        program.bind_buffers({inputs[name]: device.create_buffer(size=size, usage=wgpu.BufferUsage.COPY_DST)})
    one = device.create_buffer(size=size, usage=storage)
    with pytest.raises(ValueError, match="one buffer"):
        program.bind_buffers({inputs[engine.cache_names[0]]: one, inputs[engine.cache_names[1]]: one})
    with pytest.raises(ValueError, match="not an input or output"):
        program.bind_buffers({10**6: one})
    with pytest.raises(ValueError, match="another program"):
        engine.prefills[min(engine.prefills)].compiled.sole_gpu_program.submit(
            {}, read=False, bindings=program.bind_buffers({inputs[name]: one}))
    # a session's bind groups are made again (once) when the program's change after it was created
    expected = list(reply(new(engine, "gpu", SamplerConfig()), "the sea", 4))
    session = new(engine, "gpu", SamplerConfig())
    version = program.binding_version
    program.bind_input(inputs["tokens"], engine.token_buffer)  # the same buffer bound anew: its dispatches re-made
    assert program.binding_version == version + 1 and session.bindings[0].version == version
    assert list(reply(session, "the sea", 4)) == expected and session.bindings[0].version == version + 1
