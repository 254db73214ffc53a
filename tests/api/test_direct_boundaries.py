"""Inputs and outputs whose PHWC4 layout is their BHWC one run with no converter dispatch (lowering/dispatches.py
direct_boundaries) and give LiteRT's results through every way values cross: set_tensor / get_tensor, the
CompiledModel's TensorBuffers, set_input_buffer (a lone pixel copied in: its padding stays zero), and the GPU
decode loop, whose sampler writes the token and position into the buffers the step reads directly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import wgpu
from builders import boundary_model

from gpuengine import CompiledModel, HardwareAccelerator, Interpreter
from gpuengine.model.builder import ModelBuilder

litert = pytest.importorskip("ai_edge_litert.interpreter")

CONVERTERS = ("bhwc_to_phwc4", "phwc4_to_bhwc")


def feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"ids": np.array([[rng.integers(0, 16)]], np.int32), "x": rng.standard_normal((1, 8)).astype(np.float32),
            "img": rng.standard_normal((1, 2, 2, 3)).astype(np.float32),
            "pos": np.array([rng.integers(0, 100)], np.int32)}


def run(it, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    for d in it.get_input_details():
        if d["name"] in values:
            it.set_tensor(d["index"], values[d["name"]])
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def test_interpreter_runs_without_converters_and_equals_litert():
    model = boundary_model()
    ours = Interpreter(model_content=model)
    ours.allocate_tensors()
    theirs = litert.Interpreter(model_content=model)
    theirs.allocate_tensors()
    (program,) = ours.compiled.gpu_programs
    names = {t: program.graph.tensors[t].name.split("_")[0] for t in [*program.inputs, *program.outputs]}
    assert {names[t] for t in program.direct} == {"ids", "x", "pos", "y", "w", "v"}
    converted = [names[d.spec.bindings[0 if d.spec.shader == CONVERTERS[0] else 1].tensor]
                 for d in program.dispatches if d.spec.shader in CONVERTERS]
    assert sorted(converted) == ["img", "p", "z"]
    for seed in range(3):  # uploads into the direct buffers again and again
        values = feeds(seed)
        for g, w in zip(run(ours, values), run(theirs, values)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    # every decomposition of the projection writing `v` (the tuner's re-decomposed specs) writes its boundary buffer
    (k,) = [k for k, d in enumerate(program.dispatches) if d.spec.variants is not None
            and any(b.raw and b.writable and names.get(b.tensor) == "v" for b in d.spec.bindings)]
    values = feeds(9)
    want = run(theirs, values)
    for decomposition in program.dispatches[k].spec.variants.candidates:
        program.replace(k, decomposition)
        assert any(b.raw and b.writable for b in program.dispatches[k].spec.bindings)
        for g, w in zip(run(ours, values), want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_input_reshaped_to_an_output_stays_direct():
    """An input read in place by a projection and reshaped into an output (whose converter then reads the input's
    boundary buffer) is still a direct input: every decomposition of the projection reads it there."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 8))
    w = mb.op("RESHAPE", [x, mb.const("shape", np.array([1, 1, 8], np.int32))], (1, 1, 8), name="w")
    weights = (np.arange(64, dtype=np.float32).reshape(8, 8) % 7 - 3) / 10
    v = mb.op("FULLY_CONNECTED", [x, mb.const("weights", weights), -1], (1, 8),
              {"fused_activation_function": "NONE"}, name="v")
    mb.output(w, v)
    model = mb.build()
    ours = Interpreter(model_content=model)
    ours.allocate_tensors()
    theirs = litert.Interpreter(model_content=model)
    theirs.allocate_tensors()
    (program,) = ours.compiled.gpu_programs
    assert {program.graph.tensors[t].name.split("_")[0] for t in program.direct} == {"x", "v"}
    values = {"x": np.random.default_rng(3).standard_normal((1, 8)).astype(np.float32)}
    want = run(theirs, values)
    (k,) = [k for k, d in enumerate(program.dispatches) if d.spec.variants is not None]
    for decomposition in program.dispatches[k].spec.variants.candidates:
        program.replace(k, decomposition)
        for g, expected in zip(run(ours, values), want):
            np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-5)


def test_tensor_buffers_and_bound_inputs_equal_litert():
    """CompiledModel's buffers in and out, then an Interpreter reading `pos` and `ids` from TensorBuffers
    (set_input_buffer): a lone pixel's buffer is copied into its own, zero-padded, at each invoke."""
    model = boundary_model()
    theirs = litert.Interpreter(model_content=model)
    theirs.allocate_tensors()
    values = feeds(7)
    want = run(theirs, values)
    m = CompiledModel.from_buffer(model, hardware_accel=HardwareAccelerator.GPU)
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    order = [d["name"] for d in theirs.get_input_details()]
    for buf, name in zip(ins, order):
        buf.write(values[name])
    m.run_by_index(0, ins, outs)
    for buf, w in zip(outs, want):
        np.testing.assert_allclose(buf.read(w.size, w.dtype).reshape(w.shape), w, rtol=1e-6, atol=1e-6)

    ours = Interpreter(model_content=model)
    ours.allocate_tensors()
    device = ours.compiled.gpu.device
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    index = {d["name"]: d["index"] for d in ours.get_input_details()}
    # int32 inputs' buffers hold their values as exact f32; `pos` in a buffer of its 4 bytes alone
    for name in ("ids", "pos"):
        data = values[name].astype(np.float32).tobytes()
        ours.set_input_buffer(index[name], device.create_buffer_with_data(data=data, usage=usage))
    got = run(ours, {k: v for k, v in values.items() if k not in ("ids", "pos")})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    small = device.create_buffer_with_data(data=values["pos"].astype(np.float32).tobytes(),
                                           usage=wgpu.BufferUsage.STORAGE)
    with pytest.raises(ValueError, match="COPY_SRC"):  # neither bindable as a vec4 nor copyable: refused
        ours.set_input_buffer(index["pos"], small)


def test_gpu_decode_loop_reads_token_and_position_directly(bundle: Path):
    """The decode step binds its token and position buffers with no converter; the GPU loop (the sampler writing
    both on the GPU) gives the host loop's greedy tokens."""
    pytest.importorskip("sentencepiece")
    from gpuengine.llm import Engine, SamplerConfig

    engine = Engine(bundle)
    program = engine.decode_program
    inputs = engine.inputs_of[0]
    assert {inputs["tokens"], inputs["input_pos"]} <= program.direct
    assert not any(d.spec.shader == CONVERTERS[0] for d in program.dispatches)
    assert engine.token_buffer is program.input_buffer(inputs["tokens"])
    replies = {}
    for loop in ("gpu", "host"):
        session = engine.create_session(apply_prompt_template=False, loop=loop,
                                        sampler_config=SamplerConfig(top_k=1))
        replies[loop] = list(session.generate_tokens(session.prompt_ids("the sea"), 12))
        session.close()
    assert replies["gpu"] == replies["host"] and len(replies["gpu"]) > 1
