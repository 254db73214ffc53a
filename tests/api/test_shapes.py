"""Dynamic shapes (model/shapes.py, the shape cache in engine.py): resize_tensor_input + allocate_tensors derive every
shape op by op, value-dependent ones included, compile for it and keep the plan per input shapes; outputs equal
LiteRT's at every shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import encoder_model, fcn_model, runtime_reshape_model
from helpers import count_compiles, relative_error

from gpuengine import Interpreter, ModelError
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import SignatureDef
from gpuengine.runtime.symbolic_plan import SizedProgram

litert = pytest.importorskip("ai_edge_litert.interpreter")
LiteRT = litert.Interpreter
TOL = 1e-4


def _compare(ours: Interpreter, theirs: Any, seed: int) -> None:
    x = np.random.default_rng(seed).uniform(-1, 1, theirs.get_input_details()[0]["shape"]).astype(np.float32)
    for it in (ours, theirs):
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
    for d in theirs.get_output_details():
        got, ref = ours.get_tensor(d["index"]), theirs.get_tensor(d["index"])
        assert got.shape == ref.shape
        assert relative_error(got, ref) <= TOL, d["name"]


def test_resizes_run_on_the_gpu_match_litert_and_hit_the_cache() -> None:
    data = fcn_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    ours.allocate_tensors()
    shapes = [(1, 16, 12, 3), (1, 9, 7, 3), (1, 16, 12, 3), (1, 8, 8, 3)]
    seen = {(1, 8, 8, 3)}
    for k, shape in enumerate(shapes):
        pipelines = len(ours.compiled.gpu.pipelines)
        for it in (ours, theirs):
            it.resize_tensor_input(0, list(shape))
            it.allocate_tensors()
        if shape in seen:  # back to a shape planned before: no kernel compiled again (pipelines keyed by WGSL)
            assert len(ours.compiled.gpu.pipelines) == pipelines
        seen.add(shape)
        # every size but the declared one evaluated from the symbolic plan (runtime/symbolic_plan.py)
        assert isinstance(ours.compiled.programs[0], SizedProgram) == (shape != (1, 8, 8, 3))
        plan = ours.compiled.plan
        assert [p.device for p in plan.partitions] == ["gpu"], plan.unsupported  # fully convolutional: all GPU
        assert not any(op.code in ("SHAPE", "SLICE", "PACK") for op in plan.graph.ops)  # the chains folded
        _compare(ours, theirs, seed=k)
        # (LiteRT knows the RESIZE's output shape once it ran; we know it at allocation)
        assert [d["shape"].tolist() for d in ours.get_output_details()] == \
            [d["shape"].tolist() for d in theirs.get_output_details()] == [[*shape[:3], 2], [1]]
    # declared (1, 8, 8, 3) planned; the three new shapes evaluated from the symbolic plan (runtime/symbolic_plan.py),
    # nothing planned; back to (1, 16, 12, 3) and (1, 8, 8, 3): their programs kept, nothing made again
    assert ours.shape_cache == {"hits": 0, "misses": 1, "entries": 1}
    assert "shape cache: 1 input shapes planned, 0 hits, 1 misses" in ours.describe()


def test_back_to_a_recent_shape_reuses_its_programs_and_stays_correct() -> None:
    """The last COMPILED_SHAPES input shapes keep their compiled programs (buffers included): going back to one
    builds nothing and still equals LiteRT; an older one is built again."""
    from gpuengine.api.interpreter import COMPILED_SHAPES

    data = fcn_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    shapes = [(1, 8 + 2 * k, 6 + k, 3) for k in range(COMPILED_SHAPES + 1)]
    built = {}
    for k, shape in enumerate(shapes):
        for it in (ours, theirs):
            it.resize_tensor_input(0, list(shape))
            it.allocate_tensors()
        built[shape] = ours.compiled
        _compare(ours, theirs, seed=k)
    for k, shape in enumerate(reversed(shapes[1:])):  # the most recent COMPILED_SHAPES, newest first
        for it in (ours, theirs):
            it.resize_tensor_input(0, list(shape))
            it.allocate_tensors()
        assert ours.compiled is built[shape]
        _compare(ours, theirs, seed=10 + k)
    for it in (ours, theirs):  # evicted when the fifth shape came
        it.resize_tensor_input(0, list(shapes[0]))
        it.allocate_tensors()
    assert ours.compiled is not built[shapes[0]]
    _compare(ours, theirs, seed=20)


def test_shapes_known_only_at_run_time_fall_back_with_the_reason() -> None:
    data = runtime_reshape_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    x = np.random.default_rng(1).uniform(-1, 1, (4, 6)).astype(np.float32)
    target = np.array([3, 8], np.int32)
    for it in (ours, theirs):
        it.resize_tensor_input(0, [4, 6])
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.set_tensor(1, target)
        it.invoke()
    out = theirs.get_output_details()[0]["index"]
    np.testing.assert_allclose(ours.get_tensor(out), theirs.get_tensor(out), rtol=1e-6)
    plan = ours.compiled.plan
    devices = {plan.graph.ops[i].code: p.device for p in plan.partitions for i in p.ops}
    assert devices == {"RELU": "gpu", "RESHAPE": "cpu", "TANH": "cpu"}
    assert "known only at run time" in plan.unsupported["TANH"]
    assert "computed at run time" in plan.unsupported["RESHAPE"]


def test_a_resize_the_model_cannot_take_is_a_model_error() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 6, 2), shape_signature=(1, -1, -1, 2))
    w = mb.const("w", np.ones((2, 5, 5, 2), np.float32))
    mb.output(mb.op("CONV_2D", [x, w, mb.const("b", np.zeros(2, np.float32))], (1, 2, 2, 2),
                    {"padding": "VALID", "stride_h": 1, "stride_w": 1}, shape_signature=(1, -1, -1, 2)))
    it = Interpreter(model_content=mb.build())
    it.resize_tensor_input(0, [1, 3, 3, 2])
    with pytest.raises(ModelError, match=r"cannot run with input shapes 'x' \(1, 3, 3, 2\): op 0 \(CONV_2D\): the "
                                         r"filter height window \(5\) is larger than the input \(3\)"):
        it.allocate_tensors()
    with pytest.raises(RuntimeError, match="allocate_tensors"):
        it.invoke()
    it.resize_tensor_input(0, [1, 7, 7, 2])
    it.allocate_tensors()
    assert it.get_output_details()[0]["shape"].tolist() == [1, 3, 3, 2]


def signature_model() -> bytes:
    """A signature whose input has a dynamic batch: LiteRT's runner resizes to what it is given."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4), shape_signature=(-1, 4))
    w = mb.const("w", np.random.default_rng(2).normal(0, 1, (3, 4)).astype(np.float32))
    y = mb.op("FULLY_CONNECTED", [x, w, mb.const("b", np.zeros(3, np.float32))], (1, 3), shape_signature=(-1, 3))
    z = mb.op("TANH", [y], (1, 3), shape_signature=(-1, 3))
    mb.output(z)
    mb.signatures.append(SignatureDef("serve", 0, {"x": x}, {"y": z}))
    return mb.build()


def test_signature_runner_resizes_like_litert() -> None:
    data = signature_model()
    ours = Interpreter(model_content=data).get_signature_runner("serve")
    theirs = LiteRT(model_content=data).get_signature_runner("serve")
    for batch in (3, 1, 3):
        x = np.random.default_rng(batch).uniform(-1, 1, (batch, 4)).astype(np.float32)
        got, ref = ours(x=x)["y"], theirs(x=x)["y"]
        assert got.shape == ref.shape == (batch, 3)
        assert relative_error(got, ref) <= TOL
    assert ours._shape_cache.report() == {"hits": 1, "misses": 2, "entries": 2}  # noqa: SLF001


def test_inspect_resize_reports_the_plan_at_that_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuengine.tools.cli import main

    path = tmp_path / "fcn.tflite"
    path.write_bytes(fcn_model())
    assert main(["inspect", str(path), "--json", "--resize", "0=1,12,10,3"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["input_shapes"] == [[1, 12, 10, 3]]
    # the declared shape planned; the resize evaluated from its symbolic plan (runtime/symbolic_plan.py)
    assert report["shape_cache"] == {"hits": 0, "misses": 1, "entries": 1}
    assert report["symbolic_plan"]["made"] and report["symbolic_plan"]["sizes_served"] >= 1  # shared per device
    assert [p["device"] for p in report["partitions"]] == ["gpu"]



def forget_compiled_pipelines() -> None:
    """An earlier test on this worker's shared device may have compiled one of these kernels baked at the first
    size (then that pipeline runs, rightly, instead of the parametric one): start from an empty pipeline cache."""
    from gpuengine.runtime.device import get_device

    get_device().pipelines.clear()


def test_inspect_shows_the_symbolic_shapes_and_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RDP's section of `inspect`: the input's symbols, each op's class, the split points (model/symbolic.py)."""
    from gpuengine.tools.cli import main

    forget_compiled_pipelines()

    path = tmp_path / "fcn.tflite"
    path.write_bytes(fcn_model())
    assert main(["inspect", str(path), "--json"]) == 0
    rdp = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["symbolic"]
    assert list(rdp["symbols"]) == ["x[1]", "x[2]"] and not rdp["conflicts"]
    assert rdp["ops"][0]["outputs"] == ["[1, ceil(x[1]/2), ceil(x[2]/2), 8]"] and rdp["ops"][0]["class"] == 2
    assert rdp["ops"][4]["code"] == "RESIZE_BILINEAR" and rdp["ops"][4]["class"] == 3 and not rdp["ops"][4]["split"]
    assert main(["inspect", str(path), "--symbolic"]) == 0
    text = capsys.readouterr().out
    assert "symbols x[1], x[2]" in text and "op    5 CONV_2D                class 2: [1, x[1], x[2], 2]" in text
    assert "parametric dispatches (sizes read from a buffer, compiled once for every size): 8 of 9" in text


@pytest.mark.parametrize("model,shapes", [
    ("fcn", [(1, 12, 10, 3), (1, 16, 16, 3), (1, 7, 21, 3), (1, 30, 9, 3), (1, 24, 32, 3)]),
    ("encoder", [(1, 5, 16), (1, 13, 16), (1, 3, 16), (1, 20, 16), (1, 11, 16)]),
])
def test_new_input_sizes_compile_no_shader_and_match_litert(monkeypatch: pytest.MonkeyPatch, model: str,
                                                            shapes: list[tuple[int, ...]]) -> None:
    """RDP leaves the FCN's height and width (the encoder's sequence length) symbolic: the kernels read the
    size-dependent numbers from a small buffer (lowering/parametric.py), so five new sizes after the first compile
    no shader and equal LiteRT."""
    compiles = count_compiles(monkeypatch)
    data = fcn_model() if model == "fcn" else encoder_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    ours.allocate_tensors()
    first = len(compiles)  # 0 when an earlier test compiled these kernels on the shared device already
    dispatches = len(ours.compiled.gpu_programs[0].dispatches)
    assert ours.compiled.gpu_programs[0].parametric_dispatches >= dispatches - 1  # a static output copy may stay baked
    for k, shape in enumerate(shapes):
        for it in (ours, theirs):
            it.resize_tensor_input(0, list(shape))
            it.allocate_tensors()
        _compare(ours, theirs, seed=k)
        assert ours.compiled.gpu_programs[0].parametric_dispatches >= dispatches - 1
    assert len(compiles) == first, compiles[first:]


def test_a_static_model_keeps_its_baked_kernels() -> None:
    """No -1 size: no probe, no parametric version, every dispatch's numbers baked (the paper's speed)."""
    from gpuengine import zoo

    it = Interpreter(model_content=zoo.get("tiny"))
    it.allocate_tensors()
    program = it.compiled.gpu_programs[0]
    assert it.compiled.parametric_kernels == 0 and not it.compiled.symbolic_inputs
    assert program.parametric_dispatches == 0 and not any(program.parametric(k) for k in range(len(program.dispatches)))
