"""gpuengine.Interpreter as a drop-in for LiteRT's: same script, same details, same errors, same results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpuengine.tools import fetch
from helpers import relative_error

from gpuengine import Interpreter, ModelError
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization, SignatureDef

litert = pytest.importorskip("ai_edge_litert.interpreter")
LiteRT = litert.Interpreter
TOL = 1e-4


# -- models -----------------------------------------------------------------------------------------------
def classifier_model() -> bytes:
    """A small image classifier: conv -> depthwise conv -> add -> mean -> fully connected -> softmax."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("image", (1, 8, 8, 3))
    conv_w = mb.const("conv_w", rng.normal(0, 0.5, (6, 3, 3, 3)).astype(np.float32))
    conv_b = mb.const("conv_b", rng.normal(0, 0.1, 6).astype(np.float32))
    conv = mb.op("CONV_2D", [x, conv_w, conv_b], (1, 8, 8, 6),
                 options={"padding": "SAME", "stride_w": 1, "stride_h": 1,
                          "fused_activation_function": "RELU6"})
    dw_w = mb.const("dw_w", rng.normal(0, 0.5, (1, 3, 3, 6)).astype(np.float32))
    dw = mb.op("DEPTHWISE_CONV_2D", [conv, dw_w, mb.const("dw_b", np.zeros(6, np.float32))], (1, 8, 8, 6),
               options={"padding": "SAME", "stride_w": 1, "stride_h": 1, "depth_multiplier": 1})
    res = mb.op("ADD", [dw, conv], (1, 8, 8, 6), options={"fused_activation_function": "RELU"})
    axes = mb.const("axes", np.array([1, 2], np.int32))
    pooled = mb.op("MEAN", [res, axes], (1, 6), options={"keep_dims": False})
    logits = mb.op("FULLY_CONNECTED", [pooled, mb.const("fc_w", rng.normal(0, 1, (5, 6)).astype(np.float32)),
                                       mb.const("fc_b", rng.normal(0, 0.1, 5).astype(np.float32))], (1, 5))
    probs = mb.op("SOFTMAX", [logits], (1, 5), options={"beta": 1.0}, name="probabilities")
    mb.output(probs, pooled)
    return mb.build()


def batch_model() -> bytes:
    """[-1, 8] -> fully connected -> [-1, 3] -> softmax, stored with batch 1."""
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    x = mb.input("features", (1, 8))
    mb.tensors[x].shape_signature = (-1, 8)
    fc = mb.op("FULLY_CONNECTED", [x, mb.const("w", rng.normal(0, 1, (3, 8)).astype(np.float32)),
                                   mb.const("b", rng.normal(0, 1, 3).astype(np.float32))], (1, 3))
    mb.tensors[fc].shape_signature = (-1, 3)
    out = mb.op("SOFTMAX", [fc], (1, 3), options={"beta": 1.0})
    mb.tensors[out].shape_signature = (-1, 3)
    mb.output(out)
    return mb.build()


def signature_model() -> bytes:
    """Two inputs, two outputs, signature names deliberately not in alphabetical order of the tensors."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4))
    y = mb.input("y", (1, 4))
    total = mb.op("ADD", [x, y], (1, 4))
    prod = mb.op("MUL", [x, y], (1, 4))
    mb.output(prod, total)
    mb.signatures.append(SignatureDef("serving_default", 0, {"zeta": x, "alpha": y},
                                      {"product": prod, "sum": total}))
    return mb.build()


def details_model() -> bytes:
    """Every kind of tensor detail: dynamic batch, int8 per-tensor and per-channel quantization, ints."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4))
    mb.tensors[x].shape_signature = (-1, 4)
    q = mb.op("QUANTIZE", [x], (1, 4), dtype=np.int8)
    mb.tensors[q].quantization = Quantization(np.array([0.25], np.float32), np.array([-3], np.int64))
    dq = mb.op("DEQUANTIZE", [q], (1, 4))
    mb.const("per_channel", np.arange(12, dtype=np.int8).reshape(3, 4),
             quantization=Quantization(np.array([0.5, 0.25, 0.125], np.float32), np.zeros(3, np.int64), 0))
    mb.const("ints", np.arange(6, dtype=np.int32).reshape(2, 3))
    mb.const("longs", np.arange(2, dtype=np.int64))
    mb.const("flags", np.array([True, False]))
    mb.const("bytes", np.arange(3, dtype=np.uint8))
    mb.const("scalar", np.float32(2.5))
    mb.output(dq, q)
    return mb.build()


def cumsum_model() -> bytes:
    """ADD -> CUMSUM (no GPU kernel) -> RELU: the middle op must run on the CPU, the rest on the GPU."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 2, 3, 4))
    shifted = mb.op("ADD", [x, mb.const("shift", np.full(4, -0.25, np.float32))], (1, 2, 3, 4))
    summed = mb.op("CUMSUM", [shifted, mb.const("axis", np.array(3, np.int32))], (1, 2, 3, 4),
                   options={"exclusive": True, "reverse": False})
    out = mb.op("RELU", [summed], (1, 2, 3, 4))
    mb.output(out)
    return mb.build()


def face_model_path(name: str = "face_detection_short_range") -> Path:
    try:
        return fetch.model_path(name)
    except fetch.ModelsUnavailable as e:
        pytest.skip(f"reference models unavailable: {e}")


def feeds_for(details: list[dict[str, Any]], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]) for d in details]


def run(interpreter: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    interpreter.allocate_tensors()
    for d, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(d["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def assert_same_value(ours: Any, theirs: Any, where: str) -> None:
    """Equal values of the same Python / numpy types, recursively."""
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} vs LiteRT's {type(theirs).__name__}"
    if isinstance(theirs, np.ndarray):
        assert ours.dtype == theirs.dtype, f"{where}: dtype {ours.dtype} vs LiteRT's {theirs.dtype}"
        np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), f"{where}: keys {list(ours)} vs LiteRT's {list(theirs)}"
        for key in theirs:
            assert_same_value(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), f"{where}: {ours} vs LiteRT's {theirs}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_value(a, b, f"{where}[{k}]")
    else:
        assert ours == theirs, f"{where}: {ours!r} vs LiteRT's {theirs!r}"


def assert_details_equal(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same_value(a, b, f"tensor {b['index']} ({b['name']})")


# -- a LiteRT example script, with only its import changed ------------------------------------------------
SCRIPT = '''\
import sys

import numpy as np
from ai_edge_litert.interpreter import Interpreter

interpreter = Interpreter(model_path=sys.argv[1])
interpreter.allocate_tensors()

input_details = interpreter.get_input_details()
output_details = interpreter.get_output_details()

np.random.seed(0)
input_shape = input_details[0]["shape"]
input_data = np.array(np.random.random_sample(input_shape), dtype=np.float32)
interpreter.set_tensor(input_details[0]["index"], input_data)

interpreter.invoke()

results = {}
for detail in output_details:
    results[detail["name"]] = interpreter.get_tensor(detail["index"])
np.savez(sys.argv[2], **results)
top = np.argmax(interpreter.get_tensor(output_details[0]["index"])[0])
print("top class:", top, "shape:", output_details[0]["shape"].tolist())
'''
LITERT_IMPORT = "from ai_edge_litert.interpreter import Interpreter"
GPUENGINE_IMPORT = "from gpuengine import Interpreter"


def test_litert_script_runs_with_only_the_import_changed(tmp_path: Path) -> None:
    model = tmp_path / "classifier.tflite"
    model.write_bytes(classifier_model())
    ours_script = SCRIPT.replace(LITERT_IMPORT, GPUENGINE_IMPORT)
    changed = [(a, b) for a, b in zip(SCRIPT.splitlines(), ours_script.splitlines()) if a != b]
    assert changed == [(LITERT_IMPORT, GPUENGINE_IMPORT)]
    outputs, stdout = {}, {}
    for name, script in (("litert", SCRIPT), ("gpuengine", ours_script)):
        path = tmp_path / f"example_{name}.py"  # not gpuengine.py: that would shadow the package
        path.write_text(script)
        proc = subprocess.run([sys.executable, str(path), str(model), str(tmp_path / f"{name}.npz")],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"the {name} script failed:\n{proc.stderr[-3000:]}"
        stdout[name] = proc.stdout
        with np.load(tmp_path / f"{name}.npz") as data:
            outputs[name] = {k: data[k] for k in data.files}
    assert list(outputs["gpuengine"]) == list(outputs["litert"])
    for key, ref in outputs["litert"].items():
        got = outputs["gpuengine"][key]
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert relative_error(got, ref) <= TOL, f"output {key}: {relative_error(got, ref)}"
    assert stdout["gpuengine"] == stdout["litert"]


# -- details ----------------------------------------------------------------------------------------------
@pytest.mark.models
def test_details_match_litert_on_face_detection() -> None:
    path = face_model_path()
    ours, theirs = Interpreter(model_path=str(path)), LiteRT(model_path=str(path))
    assert len(ours.get_tensor_details()) == len(theirs.get_tensor_details()) > 100
    assert_details_equal(ours.get_tensor_details(), theirs.get_tensor_details())
    assert_details_equal(ours.get_input_details(), theirs.get_input_details())
    assert_details_equal(ours.get_output_details(), theirs.get_output_details())
    assert ours.get_signature_list() == theirs.get_signature_list()


BUILT_MODELS = [classifier_model, details_model, signature_model, batch_model, cumsum_model]


@pytest.mark.models
def test_sparse_details_match_litert() -> None:
    path = face_model_path("face_detection_full_range_sparse")
    ours, theirs = Interpreter(model_path=str(path)), LiteRT(model_path=str(path))
    assert any(d["sparsity_parameters"] for d in theirs.get_tensor_details())
    assert_details_equal(ours.get_tensor_details(), theirs.get_tensor_details())


@pytest.mark.parametrize("make", BUILT_MODELS, ids=lambda f: f.__name__)
def test_details_match_litert_on_built_models(make: Any) -> None:
    data = make()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    assert_details_equal(ours.get_tensor_details(), theirs.get_tensor_details())
    assert_details_equal(ours.get_input_details(), theirs.get_input_details())
    assert_details_equal(ours.get_output_details(), theirs.get_output_details())


def test_quantization_details() -> None:
    details = {d["name"]: d for d in Interpreter(model_content=details_model()).get_tensor_details()}
    q = details["quantize_0_0"]
    assert q["dtype"] is np.int8 and q["quantization"] == (0.25, -3)
    per_channel = details["per_channel"]["quantization_parameters"]
    assert per_channel["scales"].dtype == np.float32 and per_channel["zero_points"].dtype == np.int32
    np.testing.assert_array_equal(per_channel["scales"], [0.5, 0.25, 0.125])
    assert details["per_channel"]["quantization"] == (0.0, 0)  # LiteRT's value for per-channel tensors


# -- set_tensor / get_tensor / tensor ---------------------------------------------------------------------
BAD_VALUES = {
    "wrong_last_dim": np.zeros((1, 5), np.float32),
    "wrong_batch": np.zeros((2, 4), np.float32),
    "wrong_rank": np.zeros((4,), np.float32),
    "float64": np.zeros((1, 4), np.float64),
    "int32": np.zeros((1, 4), np.int32),
    "python_ints": [[1, 2, 3, 4]],
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_set_tensor_errors_match_litert(case: str) -> None:
    data = signature_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    ours.allocate_tensors()
    theirs.allocate_tensors()
    with pytest.raises(ValueError) as expected:
        theirs.set_tensor(0, BAD_VALUES[case])
    with pytest.raises(ValueError) as got:
        ours.set_tensor(0, BAD_VALUES[case])
    assert str(got.value) == str(expected.value)


def test_set_tensor_bad_index() -> None:
    it = Interpreter(model_content=signature_model())
    it.allocate_tensors()
    for index in (-1, 4, 99):
        with pytest.raises(ValueError, match=f"{index}"):
            it.set_tensor(index, np.zeros((1, 4), np.float32))
        with pytest.raises(ValueError):
            it.get_tensor(index)
        with pytest.raises(ValueError):
            it.tensor(index)


def test_invoke_before_allocate_raises_like_litert() -> None:
    data = signature_model()
    with pytest.raises(RuntimeError, match="allocate_tensors"):
        Interpreter(model_content=data).invoke()
    with pytest.raises(RuntimeError):
        LiteRT(model_content=data).invoke()


def test_set_and_get_copy_values() -> None:
    it = Interpreter(model_content=signature_model())
    it.allocate_tensors()
    x = np.full((1, 4), 2, np.float32)
    y = np.full((1, 4), 3, np.float32)
    it.set_tensor(0, x)
    it.set_tensor(1, y)
    x[:] = 100  # set_tensor copied: changing the caller's array afterwards has no effect
    it.invoke()
    out = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_array_equal(out, 6)
    out[:] = -1  # get_tensor returns a copy
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), 6)
    np.testing.assert_array_equal(it.get_tensor(0), 2)


def test_tensor_view_semantics() -> None:
    data = signature_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    results = []
    for it in (ours, theirs):
        it.allocate_tensors()
        prod, total = (d["index"] for d in it.get_output_details())
        x_view, y_view = it.tensor(0), it.tensor(1)
        assert callable(x_view)
        x_view()[:] = np.arange(4, dtype=np.float32)  # write the input in place, as LiteRT allows
        y_view()[0, :] = 2.0
        np.testing.assert_array_equal(it.get_tensor(0), [[0, 1, 2, 3]])
        it.invoke()
        live = it.tensor(prod)()
        assert isinstance(live, np.ndarray) and live.shape == (1, 4)
        np.testing.assert_array_equal(live, it.get_tensor(prod))
        del live  # LiteRT refuses to invoke while a view of its buffers is alive
        y_view()[:] = 10.0  # the same function keeps giving the live buffer
        it.invoke()
        results.append((it.tensor(prod)().copy(), it.tensor(total)().copy()))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(results[0][0], [[0, 10, 20, 30]])


def test_constant_tensor_readable() -> None:
    it = Interpreter(model_content=batch_model())
    it.allocate_tensors()
    weights = {d["name"]: d["index"] for d in it.get_tensor_details()}["b"]
    ref = LiteRT(model_content=batch_model())
    ref.allocate_tensors()
    np.testing.assert_array_equal(it.get_tensor(weights), ref.get_tensor(weights))


# -- signatures -------------------------------------------------------------------------------------------
def test_signature_list_matches_litert() -> None:
    data = signature_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    assert ours.get_signature_list() == theirs.get_signature_list()
    ours_runner, theirs_runner = ours.get_signature_runner(), theirs.get_signature_runner()
    assert list(ours_runner.get_input_details()) == list(theirs_runner.get_input_details())
    assert list(ours_runner.get_output_details()) == list(theirs_runner.get_output_details())


def test_signature_list_contents() -> None:
    listed = Interpreter(model_content=signature_model()).get_signature_list()
    assert list(listed) == ["serving_default"]
    assert sorted(listed["serving_default"]["inputs"]) == ["alpha", "zeta"]
    assert sorted(listed["serving_default"]["outputs"]) == ["product", "sum"]
    assert Interpreter(model_content=classifier_model()).get_signature_list() == {}


def test_signature_runner_matches_litert() -> None:
    data = signature_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    zeta = np.array([[1, 2, 3, 4]], np.float32)
    alpha = np.array([[0.5, -1, 2, 10]], np.float32)
    got = ours.get_signature_runner("serving_default")(zeta=zeta, alpha=alpha)
    ref = theirs.get_signature_runner("serving_default")(zeta=zeta, alpha=alpha)
    assert set(got) == set(ref) == {"product", "sum"}
    for name in ref:
        assert got[name].dtype == ref[name].dtype
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6)
    np.testing.assert_allclose(got["sum"], zeta + alpha)
    runner = ours.get_signature_runner()  # the only signature, by default
    for name, detail in runner.get_input_details().items():
        assert_same_value(detail, theirs.get_signature_runner().get_input_details()[name], name)


def test_signature_runner_errors() -> None:
    it = Interpreter(model_content=signature_model())
    with pytest.raises(ValueError, match="Invalid signature_key"):
        it.get_signature_runner("nope")
    runner = it.get_signature_runner()
    ok = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError):
        runner(zeta=ok)  # missing input
    with pytest.raises(ValueError, match="Invalid Input name"):
        runner(zeta=ok, alpha=ok, gamma=ok)
    with pytest.raises(ValueError):
        runner(zeta=ok.astype(np.float64), alpha=ok)
    with pytest.raises(ValueError, match="no Signature Def"):
        Interpreter(model_content=classifier_model()).get_signature_runner()


# -- resize -----------------------------------------------------------------------------------------------
def test_resize_tensor_input_batch() -> None:
    data = batch_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    for batch in (4, 2, 1):
        for it in (ours, theirs):
            it.resize_tensor_input(0, [batch, 8])
            it.allocate_tensors()
        assert_details_equal(ours.get_input_details(), theirs.get_input_details())
        assert_details_equal(ours.get_output_details(), theirs.get_output_details())
        assert ours.get_output_details()[0]["shape"].tolist() == [batch, 3]
        inputs = feeds_for(theirs.get_input_details(), seed=batch)
        (got,), (ref,) = run(ours, inputs), run(theirs, inputs)
        assert got.shape == ref.shape == (batch, 3)
        assert relative_error(got, ref) <= TOL


def test_resize_strict_only_unknown_dims() -> None:
    it = Interpreter(model_content=batch_model())
    it.resize_tensor_input(0, [5, 8], strict=True)
    it.allocate_tensors()
    assert it.get_input_details()[0]["shape"].tolist() == [5, 8]
    with pytest.raises((ValueError, RuntimeError), match="unknown dimensions"):
        it.resize_tensor_input(0, [5, 9], strict=True)


def test_resize_non_input_rejected() -> None:
    it = Interpreter(model_content=batch_model())
    with pytest.raises((ValueError, RuntimeError)):
        it.resize_tensor_input(1, [3, 8])


# -- CPU fallback -----------------------------------------------------------------------------------------
def test_unsupported_op_runs_on_cpu() -> None:
    data = cumsum_model()
    ours, theirs = Interpreter(model_content=data), LiteRT(model_content=data)
    inputs = feeds_for(theirs.get_input_details(), seed=3)
    (got,), (ref,) = run(ours, inputs), run(theirs, inputs)
    assert relative_error(got, ref) <= TOL
    assert np.any(ref > 0) and np.any(ref == 0)  # the data exercises both the sum and the RELU
    plan = ours.compiled.plan
    placed = {plan.graph.ops[i].code: p.device for p in plan.partitions for i in p.ops}
    assert placed["CUMSUM"] == "cpu"
    assert placed.get("RELU") == "gpu"
    assert "CUMSUM" in plan.unsupported
    assert "CUMSUM" in ours.describe()
    # A second invoke with new data reuses both partitions.
    inputs2 = feeds_for(theirs.get_input_details(), seed=4)
    (got2,), (ref2,) = run(ours, inputs2), run(theirs, inputs2)
    assert relative_error(got2, ref2) <= TOL and not np.array_equal(got2, got)


# -- construction -----------------------------------------------------------------------------------------
def test_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        Interpreter()
    with pytest.raises(ValueError):
        Interpreter(model_path="x.tflite", model_content=b"x")
    with pytest.raises(ModelError, match="only 7 bytes"):
        Interpreter(model_content=b"garbage")
    # LiteRT keyword arguments are accepted.
    it = Interpreter(model_content=signature_model(), num_threads=2, experimental_preserve_all_tensors=False)
    assert it.num_subgraphs() == 1
