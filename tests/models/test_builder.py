"""ModelBuilder / write_model: models it writes load and run on LiteRT and round trip through the reader."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tflite

from gpuengine.model.builder import ModelBuilder, make_options, write_model
from gpuengine.model.ir import Graph, Model, Quantization, SignatureDef
from gpuengine.model.reader import read_model

litert = pytest.importorskip("ai_edge_litert.interpreter")


def run_litert(data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    it = litert.Interpreter(model_content=data)
    it.allocate_tensors()
    for d, value in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], value)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def conv_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: str) -> np.ndarray:
    """Reference stride-1 CONV_2D; x [1,H,W,Ci], w [Co,KH,KW,Ci]."""
    _, kh, kw, _ = w.shape
    if pad == "SAME":
        x = np.pad(x, ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((1, oh, ow, w.shape[0]), np.float64)
    for i in range(oh):
        for j in range(ow):
            out[0, i, j] = np.tensordot(x[0, i:i + kh, j:j + kw], w, axes=([0, 1, 2], [1, 2, 3]))
    return out + b


# -- running on LiteRT ------------------------------------------------------------------------------------
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_multi_op_model_runs_on_litert(padding: str) -> None:
    rng = np.random.default_rng(0)
    xv = rng.uniform(-1, 1, (1, 6, 5, 3)).astype(np.float32)
    wv = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    bv = rng.uniform(-1, 1, 4).astype(np.float32)
    oh, ow = (6, 5) if padding == "SAME" else (4, 3)
    mb = ModelBuilder()
    x = mb.input("x", xv.shape)
    conv = mb.op("CONV_2D", [x, mb.const("w", wv), mb.const("b", bv)], (1, oh, ow, 4),
                 options={"padding": padding, "stride_w": 1, "stride_h": 1,
                          "fused_activation_function": "RELU6"})
    added = mb.op("ADD", [conv, mb.const("c", np.full(4, -0.5, np.float32))], (1, oh, ow, 4))
    flat = mb.op("RESHAPE", [added], (1, oh * ow * 4), options={"new_shape": [1, oh * ow * 4]})
    soft = mb.op("SOFTMAX", [flat], (1, oh * ow * 4), options={"beta": 2.0})
    mb.output(soft, added)
    got_soft, got_added = run_litert(mb.build(), xv)
    ref_added = np.clip(conv_nhwc(xv, wv, bv, padding), 0, 6) - 0.5
    np.testing.assert_allclose(got_added, ref_added, atol=1e-5)
    logits = 2.0 * ref_added.reshape(1, -1)
    ref_soft = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(got_soft, ref_soft, rtol=1e-4, atol=1e-7)


def test_enum_options_by_name_and_number() -> None:
    by_name = make_options("CONV_2D", {"padding": "valid", "fused_activation_function": "relu_n1_to_1"})
    relu1 = tflite.ActivationFunctionType.RELU_N1_TO_1
    by_number = make_options("CONV_2D", {"padding": tflite.Padding.VALID, "fused_activation_function": relu1})
    assert by_name == by_number
    assert by_name is not None and by_name.kind == "Conv2DOptions"
    mb = ModelBuilder()
    x = mb.input("x", (1, 4))
    y = mb.op("ADD", [x, x], (1, 4), options={"fused_activation_function": "RELU_N1_TO_1"})
    mb.output(y)
    data = mb.build()
    op = read_model(data).main.ops[0]
    assert op.options is not None and op.options.kind == "AddOptions"
    assert op.opt("fused_activation_function") == tflite.ActivationFunctionType.RELU_N1_TO_1
    (out,) = run_litert(data, np.array([[-2, -0.25, 0.25, 2]], np.float32))
    np.testing.assert_array_equal(out, [[-1, -0.5, 0.5, 1]])


def test_pool_and_reducer_options_run() -> None:
    xv = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
    mb = ModelBuilder()
    x = mb.input("x", xv.shape)
    pool = mb.op("MAX_POOL_2D", [x], (1, 2, 2, 2), options={"padding": "VALID", "stride_w": 2, "stride_h": 2,
                                                             "filter_width": 2, "filter_height": 2})
    mean = mb.op("MEAN", [x, mb.const("axes", np.array([1, 2], np.int32))], (1, 1, 1, 2),
                 options={"keep_dims": True})
    mb.output(pool, mean)
    got_pool, got_mean = run_litert(mb.build(), xv)
    np.testing.assert_array_equal(got_pool, xv.reshape(1, 2, 2, 2, 2, 2).max(axis=(2, 4)))
    np.testing.assert_allclose(got_mean, xv.mean(axis=(1, 2), keepdims=True))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16, np.bool_])
def test_constants_round_trip(dtype: Any) -> None:
    values = (np.arange(-6, 6) % 3 == 0) if dtype is np.bool_ else np.arange(-6, 6) % 100
    const = np.asarray(values, dtype).reshape(3, 4)
    mb = ModelBuilder()
    x = mb.input("x", (3, 4), dtype)
    c = mb.const("c", const)
    y = mb.op("CONCATENATION", [x, c], (6, 4), dtype=dtype, options={"axis": 0})
    mb.output(y)
    data = mb.build()
    t = read_model(data).main.tensors[c]
    assert t.dtype == np.dtype(dtype) and t.shape == (3, 4)
    np.testing.assert_array_equal(t.data, const)
    (out,) = run_litert(data, np.zeros((3, 4), dtype))
    np.testing.assert_array_equal(out[3:], const)


def test_quantization_round_trip() -> None:
    per_tensor = Quantization(np.array([0.5], np.float32), np.array([3], np.int64))
    per_channel = Quantization(np.array([0.1, 0.2, 0.4], np.float32), np.zeros(3, np.int64), axis=0)
    mb = ModelBuilder()
    x = mb.input("x", (1, 4))
    q = mb.op("QUANTIZE", [x], (1, 4), dtype=np.int8)
    mb.tensors[q].quantization = per_tensor
    d = mb.op("DEQUANTIZE", [q], (1, 4))
    wq = mb.const("wq", np.arange(6, dtype=np.int8).reshape(3, 2), quantization=per_channel)
    mb.output(d, q)
    data = mb.build()

    tensors = read_model(data).main.tensors
    for index, want in ((q, per_tensor), (wq, per_channel)):
        got = tensors[index].quantization
        assert got is not None
        np.testing.assert_array_equal(got.scale, want.scale)
        np.testing.assert_array_equal(got.zero_point, want.zero_point)
        assert got.axis == want.axis

    it = litert.Interpreter(model_content=data)
    details = {d["index"]: d for d in it.get_tensor_details()}
    assert details[q]["quantization"] == (0.5, 3)
    np.testing.assert_allclose(details[wq]["quantization_parameters"]["scales"], [0.1, 0.2, 0.4])
    assert details[wq]["quantization_parameters"]["quantized_dimension"] == 0
    dq, qv = run_litert(data, np.array([[0, 1.2, -3, 100]], np.float32))
    np.testing.assert_array_equal(qv, [[3, 5, -3, 127]])
    np.testing.assert_array_equal(dq, [[0, 1, -3, 62]])


def test_custom_op_with_custom_options() -> None:
    blob = bytes(range(256)) * 3
    mb = ModelBuilder()
    x = mb.input("x", (2, 3))
    y = mb.op("MyCustomOp", [x, -1], [(2, 3), (1,)], custom_options=blob)
    z = mb.op("RELU", [y[0]], (2, 3))
    mb.output(z, y[1])
    data = mb.build()
    ops = read_model(data).main.ops
    assert ops[0].code == "MyCustomOp" and ops[0].is_custom and ops[0].custom_code == "MyCustomOp"
    assert ops[0].builtin_code == tflite.BuiltinOperator.CUSTOM
    assert ops[0].custom_options == blob and ops[0].inputs == [x, -1]
    assert ops[1].code == "RELU" and not ops[1].is_custom and ops[1].custom_options is None
    # LiteRT parses the file and names the custom op it has no kernel for.
    with pytest.raises(RuntimeError, match="unresolved custom op: MyCustomOp"):
        litert.Interpreter(model_content=data).allocate_tensors()


def test_op_codes_beyond_127() -> None:
    # CUMSUM (128) needs the extended builtin_code; the deprecated one holds PLACEHOLDER_FOR_GREATER_OP_CODES
    mb = ModelBuilder()
    x = mb.input("x", (2, 3))
    y = mb.op("CUMSUM", [x, mb.const("axis", np.array(1, np.int32))], (2, 3))
    mb.output(y)
    data = mb.build()
    code = tflite.Model.GetRootAsModel(data, 0).OperatorCodes(0)
    assert code.BuiltinCode() == tflite.BuiltinOperator.CUMSUM
    assert code.DeprecatedBuiltinCode() == tflite.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES
    assert read_model(data).main.ops[0].code == "CUMSUM"
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_litert(data, xv)[0], np.cumsum(xv, axis=1))


def test_signature_defs_round_trip() -> None:
    mb = ModelBuilder()
    a = mb.input("a", (1, 3))
    b = mb.input("b", (1, 3))
    s = mb.op("ADD", [a, b], (1, 3))
    p = mb.op("MUL", [a, b], (1, 3))
    mb.output(s, p)
    mb.signatures.append(SignatureDef("serving_default", 0, {"lhs": a, "rhs": b}, {"sum": s, "product": p}))
    mb.signatures.append(SignatureDef("other", 0, {"x": a, "y": b}, {"z": p}))
    data = mb.build()
    sigs = read_model(data).signatures
    assert sigs == mb.signatures
    it = litert.Interpreter(model_content=data)
    listed = it.get_signature_list()
    assert set(listed) == {"serving_default", "other"}
    assert sorted(listed["serving_default"]["inputs"]) == ["lhs", "rhs"]
    assert sorted(listed["serving_default"]["outputs"]) == ["product", "sum"]
    av, bv = np.array([[1, 2, 3]], np.float32), np.array([[4, 5, 6]], np.float32)
    out = it.get_signature_runner("serving_default")(lhs=av, rhs=bv)
    np.testing.assert_array_equal(out["sum"], av + bv)
    np.testing.assert_array_equal(out["product"], av * bv)


def test_shape_signature_and_variables_round_trip() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 3))
    mb.tensors[x].shape_signature = (-1, 3)
    mb.output(mb.op("RELU", [x], (1, 3)))
    data = mb.build()
    assert read_model(data).main.tensors[x].shape_signature == (-1, 3)
    details = litert.Interpreter(model_content=data).get_input_details()[0]
    np.testing.assert_array_equal(details["shape_signature"], [-1, 3])

    model = mb.to_model()
    model.main.tensors[x].is_variable = True
    assert read_model(write_model(model)).main.tensors[x].is_variable


def test_multiple_subgraphs_if_op() -> None:
    def branch(code: str) -> Graph:
        sb = ModelBuilder()
        v = sb.input("v", (3,))
        sb.output(sb.op(code, [v, v], (3,)))
        return sb.to_model().main

    mb = ModelBuilder()
    cond = mb.input("cond", (1,), np.bool_)
    x = mb.input("x", (3,))
    y = mb.op("IF", [cond, x], (3,), options={"then_subgraph_index": 1, "else_subgraph_index": 2})
    mb.output(y)
    main = mb.to_model().main
    main.name = "main"
    model = Model(subgraphs=[main, branch("ADD"), branch("MUL")])
    data = write_model(model)
    back = read_model(data)
    assert [[op.code for op in g.ops] for g in back.subgraphs] == [["IF"], ["ADD"], ["MUL"]]
    if_op = back.main.ops[0]
    assert if_op.opt("then_subgraph_index") == 1 and if_op.opt("else_subgraph_index") == 2
    xv = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(run_litert(data, np.array([True]), xv)[0], xv + xv)
    np.testing.assert_array_equal(run_litert(data, np.array([False]), xv)[0], xv * xv)

