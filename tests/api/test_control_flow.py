"""Control flow (gpuengine/control_flow.py): WHILE and IF driven by the host, their subgraphs compiled as GPU
programs; loop-carried float32 tensors stay on the GPU between iterations (ping-pong buffers); a WHILE/IF without
GPU ops runs on LiteRT with the subgraphs it calls. Every model is written by the ModelBuilder and checked against
LiteRT, with both branches of every IF taken."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import relative_error, tolerance

from gpuengine import Interpreter
from gpuengine.model.builder import ModelBuilder
from gpuengine.runtime.control_flow import IfProgram, WhileProgram

litert = pytest.importorskip("ai_edge_litert.interpreter")
LiteRT = litert.Interpreter
F32 = np.float32
TOL = 1e-4
NONE = {"fused_activation_function": "NONE"}


def _add(mb: ModelBuilder, a: int, b: int, shape: tuple[int, ...], dtype: Any = F32) -> int:
    return mb.op("ADD", [a, b], shape, NONE, dtype=dtype)  # type: ignore[return-value]


def _mul(mb: ModelBuilder, a: int, b: int, shape: tuple[int, ...]) -> int:
    return mb.op("MUL", [a, b], shape, NONE)  # type: ignore[return-value]


def _less_than(limit: float | None, shapes: list[tuple[int, ...]], dtype: Any = F32) -> ModelBuilder:
    """A cond subgraph: loop variable 0 < `limit` (a constant), or < loop variable 1 when limit is None."""
    cond = ModelBuilder("cond")
    ins = [cond.input(f"v{k}", s, dtype if k == 0 else F32) for k, s in enumerate(shapes)]
    bound = ins[1] if limit is None else cond.const("limit", np.full(shapes[0], limit, dtype))
    cond.output(cond.op("LESS", [ins[0], bound], shapes[0], dtype=np.bool_))
    return cond


def _while(mb: ModelBuilder, inputs: list[int], shapes: list[tuple[int, ...]], cond: ModelBuilder,
           body: ModelBuilder, dtype: Any = F32, caller: ModelBuilder | None = None) -> list[int]:
    """A WHILE op in `caller` (default: the main graph, mb), its cond and body added to the model (mb)."""
    c, b = mb.add_subgraph(cond), mb.add_subgraph(body)
    return (caller or mb).op("WHILE", inputs, shapes, {"cond_subgraph_index": c, "body_subgraph_index": b},  # type: ignore
                 dtype=[dtype, *[F32] * (len(shapes) - 1)])


def counter_loop() -> bytes:
    """i = 0; while i < limit: i += 1; x = x * 0.5 + 1. Loop variables (i, limit, x): limit passes through."""
    mb = ModelBuilder()
    x, limit = mb.input("x", (1, 4)), mb.input("limit", (1,))
    body = ModelBuilder("body")
    i, bl, bx = body.input("i", (1,)), body.input("limit", (1,)), body.input("x", (1, 4))
    half = _mul(body, bx, body.const("half", np.full((1, 4), 0.5, F32)), (1, 4))
    body.output(_add(body, i, body.const("one", np.ones(1, F32)), (1,)), bl,
                _add(body, half, body.const("ones", np.ones((1, 4), F32)), (1, 4)))
    outs = _while(mb, [mb.const("zero", np.zeros(1, F32)), limit, x], [(1,), (1,), (1, 4)],
                  _less_than(None, [(1,), (1,), (1, 4)]), body)
    mb.output(outs[0], outs[2])
    return mb.build()


def recurrent_cell(steps: float = 6.0) -> bytes:
    """h = tanh(W_x x + W_h h + b) iterated `steps` times by a WHILE: loop variables (step, h, x), x unchanged."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x, h0 = mb.input("x", (1, 8)), mb.input("h0", (1, 16))
    body = ModelBuilder("cell")
    step, h, bx = body.input("step", (1,)), body.input("h", (1, 16)), body.input("x", (1, 8))
    wx = body.const("w_x", rng.normal(0, 0.35, (16, 8)).astype(F32))
    wh = body.const("w_h", rng.normal(0, 0.25, (16, 16)).astype(F32))
    fx = body.op("FULLY_CONNECTED", [bx, wx, body.const("b", rng.normal(0, 0.1, 16).astype(F32))], (1, 16), NONE)
    fh = body.op("FULLY_CONNECTED", [h, wh, -1], (1, 16), NONE)
    h1 = body.op("TANH", [_add(body, fx, fh, (1, 16))], (1, 16))
    body.output(_add(body, step, body.const("one", np.ones(1, F32)), (1,)), h1, bx)
    outs = _while(mb, [mb.const("step0", np.zeros(1, F32)), h0, x], [(1,), (1, 16), (1, 8)],
                  _less_than(steps, [(1,), (1, 16), (1, 8)]), body)
    mb.output(outs[1], outs[0])
    return mb.build()


def _conv(mb: ModelBuilder, x: int, k: int, activation: str, seed: int) -> int:
    rng = np.random.default_rng(seed)
    w = mb.const("w", rng.normal(0, 0.4, (4, k, k, 3)).astype(F32))
    b = mb.const("b", rng.normal(0, 0.1, 4).astype(F32))
    return mb.op("CONV_2D", [x, w, b], (1, 8, 8, 4), {"padding": "SAME", "stride_h": 1, "stride_w": 1,  # type: ignore
                                                     "fused_activation_function": activation})


def if_conv_heads() -> bytes:
    """IF(mean(x) > 0, x): a 3x3 conv head with RELU, else a 1x1 conv head followed by TANH; the condition is
    computed in the model (MEAN -> GREATER) and the result goes through one more op."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 3))
    m = mb.op("MEAN", [x, mb.const("axes", np.array([1, 2, 3], np.int32))], (1, 1, 1, 1), {"keep_dims": True})
    flag = mb.op("GREATER", [m, mb.const("zero", np.zeros((1, 1, 1, 1), F32))], (1, 1, 1, 1), dtype=np.bool_)
    then, other = ModelBuilder("then"), ModelBuilder("else")
    then.output(_conv(then, then.input("x", (1, 8, 8, 3)), 3, "RELU", seed=1))
    other.output(other.op("TANH", [_conv(other, other.input("x", (1, 8, 8, 3)), 1, "NONE", seed=2)], (1, 8, 8, 4)))
    t, e = mb.add_subgraph(then), mb.add_subgraph(other)
    y = mb.op("IF", [flag, x], (1, 8, 8, 4), {"then_subgraph_index": t, "else_subgraph_index": e})
    mb.output(mb.op("MUL", [y, mb.const("two", np.full((1, 1, 1, 4), 2.0, F32))], (1, 8, 8, 4), NONE))
    return mb.build()


def if_in_while() -> bytes:
    """while i < 4: x = (x * 1.5 if i < 2 else x - 0.25); i += 1: an IF inside a WHILE body, both branches taken."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 6))
    then, other = ModelBuilder("then"), ModelBuilder("else")
    tx = then.input("x", (1, 6))
    then.output(_mul(then, tx, then.const("k", np.full((1, 6), 1.5, F32)), (1, 6)))
    ox = other.input("x", (1, 6))
    other.output(_add(other, ox, other.const("k", np.full((1, 6), -0.25, F32)), (1, 6)))
    body = ModelBuilder("body")
    i, bx = body.input("i", (1,)), body.input("x", (1, 6))
    flag = body.op("LESS", [i, body.const("two", np.full(1, 2.0, F32))], (1,), dtype=np.bool_)
    t, e = mb.add_subgraph(then), mb.add_subgraph(other)
    y = body.op("IF", [flag, bx], (1, 6), {"then_subgraph_index": t, "else_subgraph_index": e})
    body.output(_add(body, i, body.const("one", np.ones(1, F32)), (1,)), y)
    outs = _while(mb, [mb.const("i0", np.zeros(1, F32)), x], [(1,), (1, 6)], _less_than(4.0, [(1,), (1, 6)]), body)
    mb.output(outs[1], outs[0])
    return mb.build()


def while_in_while() -> bytes:
    """for j in range(3): (for k in range(2): x = tanh(x * 1.25 + j)): a WHILE in the body of a WHILE."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 5))
    inner = ModelBuilder("inner")
    k, ij, ix = inner.input("k", (1,)), inner.input("j", (1,)), inner.input("x", (1, 5))
    scaled = _mul(inner, ix, inner.const("s", np.full((1, 5), 1.25, F32)), (1, 5))
    inner.output(_add(inner, k, inner.const("one", np.ones(1, F32)), (1,)), ij,
                 inner.op("TANH", [_add(inner, scaled, ij, (1, 5))], (1, 5)))
    outer = ModelBuilder("outer")
    j, ox = outer.input("j", (1,)), outer.input("x", (1, 5))
    got = _while(mb, [outer.const("k0", np.zeros(1, F32)), j, ox], [(1,), (1,), (1, 5)],
                 _less_than(2.0, [(1,), (1,), (1, 5)]), inner, caller=outer)
    outer.output(_add(outer, j, outer.const("one", np.ones(1, F32)), (1,)), got[2])
    outs = _while(mb, [mb.const("j0", np.zeros(1, F32)), x], [(1,), (1, 5)], _less_than(3.0, [(1,), (1, 5)]), outer)
    mb.output(outs[1])
    return mb.build()


def _compare(data: bytes, feeds: list[dict[int, np.ndarray]], tol: float = TOL) -> Interpreter:
    """Run every feed through gpuengine and LiteRT; outputs (shapes and values) must agree each time."""
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    for it in (ours, theirs):
        it.allocate_tensors()
    for feed in feeds:
        for it in (ours, theirs):
            for t, v in feed.items():
                it.set_tensor(t, v)
            it.invoke()
        for d in theirs.get_output_details():
            got, ref = ours.get_tensor(d["index"]), theirs.get_tensor(d["index"])
            assert got.shape == ref.shape and got.dtype == ref.dtype, d["name"]
            assert relative_error(got, ref) <= tolerance(ours, tol), (d["name"], got, ref)
    return ours


def int_loop(dtype: Any) -> bytes:
    """i = 0 (int32 or int64); while i < 3: i += 1; x = cumsum(x) * 0.5 (int64: no op of it runs on the GPU) or
    x = tanh(x * 1.5) (int32: on the GPU, the counter carried as float32)."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 6))
    body = ModelBuilder("body")
    i, bx = body.input("i", (1,), dtype), body.input("x", (1, 6))
    if dtype == np.int64:
        summed = body.op("CUMSUM", [bx, body.const("axis", np.array(1, np.int32))], (1, 6))
        y = body.op("REVERSE_V2", [summed, body.const("axes", np.array([1], np.int32))], (1, 6))
    else:
        y = body.op("TANH", [_mul(body, bx, body.const("k", np.full((1, 6), 1.5, F32)), (1, 6))], (1, 6))
    body.output(_add(body, i, body.const("one", np.ones(1, dtype)), (1,), dtype), y)
    outs = _while(mb, [mb.const("i0", np.zeros(1, dtype)), x], [(1,), (1, 6)],
                  _less_than(3, [(1,), (1, 6)], dtype), body, dtype)
    mb.output(outs[1], outs[0])
    return mb.build()


def _feed(data: bytes, seed: int) -> dict[int, np.ndarray]:
    ref = LiteRT(model_content=data)
    rng = np.random.default_rng(seed)
    return {d["index"]: rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) for d in ref.get_input_details()}


def _only_control(it: Interpreter) -> Any:
    programs = it.compiled.control_programs
    assert len(programs) == 1
    return programs[0]


def test_counter_loop_runs_any_number_of_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuengine.runtime.program import GpuProgram

    data = counter_loop()
    x = np.arange(4, dtype=F32).reshape(1, 4) / 4
    limits = [5.0, 0.0, 3.5, 1.0, 5.0]
    reads: list[int] = []
    read = GpuProgram.read_outputs
    monkeypatch.setattr(GpuProgram, "read_outputs", lambda self: reads.append(1) or read(self))
    ours = Interpreter(model_content=data)
    theirs = LiteRT(model_content=data)
    for it in (ours, theirs):
        it.allocate_tensors()
    loop = _only_control(ours)
    assert isinstance(loop, WhileProgram) and ours.compiled.plan.control[0].resident is None
    for limit in limits:
        for it in (ours, theirs):
            it.set_tensor(0, x)
            it.set_tensor(1, np.array([limit], F32))
            it.invoke()
        for d in theirs.get_output_details():
            np.testing.assert_allclose(ours.get_tensor(d["index"]), theirs.get_tensor(d["index"]), rtol=1e-6)
        assert loop.iterations == int(np.ceil(limit))
    assert len(reads) == sum(1 for limit in limits if limit > 0)  # the loop variables come back once per invoke


def test_recurrent_cell_keeps_its_state_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cell's cond and body are one GPU program each: h, the step and x (passed through) stay in GPU buffers;
    per iteration the host reads the cond's 4 bytes and submits the body without reading anything back."""
    from gpuengine.runtime.program import GpuProgram

    data = recurrent_cell(steps=6.0)
    submits: list[bool] = []
    original = GpuProgram.submit

    def counting_submit(self: GpuProgram, feeds: dict[int, np.ndarray], read: bool = True, **kw: Any) -> Any:
        submits.append(read)
        return original(self, feeds, read=read, **kw)

    monkeypatch.setattr(GpuProgram, "submit", counting_submit)
    ours = _compare(data, [_feed(data, seed) for seed in range(3)])
    loop = _only_control(ours)
    plan = ours.compiled.plan.control[0]
    assert plan.resident is None and loop.iterations == 6
    assert plan.report()["loop_carried"] == "gpu (ping-pong buffers)"
    assert "loop-carried tensors on the GPU (ping-pong buffers)" in ours.describe()
    assert re.search(r"dispatches per invoke: \d+ \(\+ [1-9]\d* in WHILE/IF subgraphs", ours.describe())
    assert list(loop._loop.own) == [2]  # noqa: SLF001 - x, which the body passes through, has one buffer
    # 3 invokes: 7 cond submits (each reads 4 bytes back) and 6 body submits reading nothing, each
    assert submits.count(False) == 3 * 6
    assert submits.count(True) == 3 * 7


def test_if_chooses_between_two_conv_heads_both_taken() -> None:
    data = if_conv_heads()
    positive = np.random.default_rng(0).uniform(-0.5, 1, (1, 8, 8, 3)).astype(F32)
    feeds = [{0: positive}, {0: -positive}, {0: positive}]
    ours = Interpreter(model_content=data)
    ours.allocate_tensors()
    branch = _only_control(ours)
    assert isinstance(branch, IfProgram)
    taken = []
    theirs = LiteRT(model_content=data)
    theirs.allocate_tensors()
    for feed in feeds:
        for it in (ours, theirs):
            it.set_tensor(0, feed[0])
            it.invoke()
        out = theirs.get_output_details()[0]["index"]
        assert relative_error(ours.get_tensor(out), theirs.get_tensor(out)) <= tolerance(ours, TOL)
        taken.append(branch.taken)
    assert taken == ["then", "else", "then"]
    plan = ours.compiled.plan
    # the condition (MEAN -> GREATER, read as a float) and the head after the IF run on the GPU
    assert [p.device for p in plan.partitions] == ["gpu", "control", "gpu"]
    assert all(p.device == "gpu" for sub in plan.control[plan.partitions[1].ops[0]].plans.values()
               for p in sub.partitions)


def test_if_inside_a_while_body() -> None:
    data = if_in_while()
    ours = _compare(data, [_feed(data, seed) for seed in range(2)])
    loop = _only_control(ours)
    assert loop.iterations == 4
    assert "the body is not one GPU program" in (ours.compiled.plan.control[0].resident or "")
    inner = loop.compiled["body"].control_programs
    assert len(inner) == 1 and isinstance(inner[0], IfProgram) and inner[0].taken == "else"  # i = 3: else


def test_while_inside_a_while_body() -> None:
    data = while_in_while()
    ours = _compare(data, [_feed(data, 7)])
    outer = _only_control(ours)
    assert outer.iterations == 3
    (inner,) = outer.compiled["body"].control_programs
    assert isinstance(inner, WhileProgram) and inner.iterations == 2
    assert inner.plan.resident is None  # the inner loop's variables stay on the GPU
    # the outer loop's variables cross the host (its body holds a WHILE): the host evaluates its cond, no GPU trip
    assert outer.plan.resident and [p.device for p in outer.plan.plans["cond"].partitions] == ["cpu"]
    assert outer.timing.decisions == outer.iterations + 1


def test_while_without_gpu_ops_runs_on_litert_with_its_subgraphs() -> None:
    data = int_loop(np.int64)
    ours = _compare(data, [_feed(data, 1)])
    plan = ours.compiled.plan
    assert [p.device for p in plan.partitions] == ["cpu"]
    assert "no op of its subgraphs runs on the GPU" in plan.unsupported["WHILE"]


def test_cpu_fallback_carries_nested_subgraphs() -> None:
    """A WHILE whose body holds an IF, run as a CPU partition: the sub-model keeps all four subgraphs it calls,
    renumbered, and LiteRT runs it."""
    from gpuengine.delegate.cpu_fallback import CpuProgram, sub_model
    from gpuengine.delegate.partition import Partition

    from gpuengine.model.reader import read_model

    data = if_in_while()
    model = read_model(data)
    graph = model.main
    part = Partition("cpu", [0], list(graph.ops[0].inputs[1:]), list(graph.outputs))
    written = read_model(sub_model(graph, part, model)[0])
    assert len(written.subgraphs) == 5
    assert written.main.ops[0].opt("cond_subgraph_index") == 1 and written.main.ops[0].opt("body_subgraph_index") == 2
    body_if = written.subgraphs[2].ops[1]
    assert body_if.code == "IF" and {body_if.opt("then_subgraph_index"), body_if.opt("else_subgraph_index")} == {3, 4}
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(1, 6)
    got = CpuProgram(graph, part, model=model).run({graph.inputs[0]: x})
    ref = LiteRT(model_content=data)
    ref.allocate_tensors()
    ref.set_tensor(graph.inputs[0], x)
    ref.invoke()
    for t in graph.outputs:
        np.testing.assert_allclose(got[t], ref.get_tensor(t), rtol=1e-6)


def test_int32_loop_variable_stays_on_the_gpu() -> None:
    """An int32 loop counter (TF2's while_loop adds one to every loop) is carried on the GPU as float32 with the
    other loop variables, and comes back as int32."""
    data = int_loop(np.int32)
    ours = _compare(data, [_feed(data, seed) for seed in range(2)])
    loop = _only_control(ours)
    assert loop.iterations == 3 and loop._loop is not None  # noqa: SLF001
    assert ours.compiled.plan.control[0].resident is None
    counter = ours.get_output_details()[1]
    assert counter["dtype"] == np.int32 and ours.get_tensor(counter["index"]).dtype == np.int32
    assert ours.get_tensor(counter["index"]).tolist() == [3]


def test_inspect_shows_host_driven_gpu_partitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuengine.tools.cli import main

    path = tmp_path / "cell.tflite"
    path.write_bytes(recurrent_cell())
    assert main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (part,) = report["partitions"]
    assert part["device"] == "gpu" and part["driver"] == "host" and part["op"] == "WHILE"
    assert part["loop_carried"] == "gpu (ping-pong buffers)"
    assert {role: [p["device"] for p in s["partitions"]] for role, s in part["subgraphs"].items()} == \
        {"cond": ["gpu"], "body": ["gpu"]}
    assert report["ops_gpu"] == 1
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "partition 0 [gpu, driven by the host]: WHILE (cond subgraph 1: ['gpu'], body subgraph 2: ['gpu']); " \
           "loop-carried tensors: gpu (ping-pong buffers)" in text
