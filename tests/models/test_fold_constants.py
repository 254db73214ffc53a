"""Load-time constant folding: weight DEQUANTIZE/DENSIFY, static SHAPE chains, host evaluation vs LiteRT."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import assert_matches_litert, reference_model, run_gpuengine, run_litert

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.folding import FOLDERS
from gpuengine.model.ir import Quantization
from gpuengine.model.reader import read_model
from gpuengine.passes.fold_constants import _evaluate_litert, fold_constants


def _codes(it) -> list[str]:  # noqa: ANN001 - an Interpreter
    return [op.code for op in it.compiled.plan.graph.ops]


def test_dequantize_fp16_weights() -> None:
    w = np.random.default_rng(0).uniform(-2, 2, (1, 1, 5)).astype(np.float16)
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 4, 5))
    deq = mb.op("DEQUANTIZE", [mb.const("w16", w)], w.shape)
    mb.output(mb.op("MUL", [x, deq], (1, 3, 4, 5)))
    it = assert_matches_litert(mb.build(), tol=1e-6)
    assert _codes(it) == ["MUL"]


@pytest.mark.parametrize("per_channel", [False, True])
def test_dequantize_int8(per_channel: bool) -> None:
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (3, 7)).astype(np.int8)
    if per_channel:  # along axis 1 (the channels the ADD broadcasts over)
        q = Quantization(scale=rng.uniform(0.01, 0.1, 7).astype(np.float32),
                         zero_point=np.zeros(7, np.int64), axis=1)
    else:
        q = Quantization(scale=np.array([0.03], np.float32), zero_point=np.array([5], np.int64))
    mb = ModelBuilder()
    x = mb.input("x", (2, 3, 7))
    deq = mb.op("DEQUANTIZE", [mb.const("w8", w, quantization=q)], (3, 7))
    mb.output(mb.op("ADD", [x, deq], (2, 3, 7)))
    it = assert_matches_litert(mb.build(), tol=1e-6)
    assert _codes(it) == ["ADD"]


def test_int4_weights_unpack_low_nibble_first() -> None:
    """TFLite packs INT4 two a byte, the first value in the low nibble, both sign-extended."""
    from gpuengine.model.ir import Tensor
    from gpuengine.model.quantization import dequantize

    values = np.array([-8, 7, 3, -1, 0], np.int8)
    packed = np.zeros(3, np.uint8)
    for i, v in enumerate(values):
        packed[i // 2] |= (int(v) & 0xF) << (4 * (i % 2))
    q = Quantization(scale=np.array([0.5], np.float32), zero_point=np.array([0], np.int64))
    t = Tensor(index=0, name="w", shape=(5,), dtype=np.dtype(np.int8), data=packed, quantization=q, type_code=17)
    np.testing.assert_array_equal(dequantize(t), values.astype(np.float32) * 0.5)


def test_constant_depthwise_conv_without_bias_folds() -> None:
    """LiteRT crashes on a two-input DEPTHWISE_CONV_2D; folding gives it a zero bias first."""
    rng = np.random.default_rng(2)
    mb = ModelBuilder()
    image = mb.const("image", rng.standard_normal((1, 4, 4, 3)).astype(np.float32))
    w = mb.const("w", rng.standard_normal((1, 3, 3, 3)).astype(np.float32))
    dw = mb.op("DEPTHWISE_CONV_2D", [image, w], (1, 4, 4, 3),
               {"padding": "SAME", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1})
    x = mb.input("x", (1, 4, 4, 3))
    mb.output(mb.op("ADD", [x, dw], (1, 4, 4, 3)))
    graph = fold_constants(read_model(mb.build()).main)
    assert [op.code for op in graph.ops] == ["ADD"]
    folded = graph.tensors[graph.ops[0].inputs[1]].data
    img, wt = (np.asarray(read_model(mb.build()).main.tensors[t].data) for t in (image, w))
    padded = np.pad(img, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(padded[:, i:i + 4, j:j + 4, :] * wt[0, i, j] for i in range(3) for j in range(3))
    np.testing.assert_allclose(folded, want, rtol=1e-5, atol=1e-5)


def test_densify_matches_litert_on_pose_detection() -> None:
    """The real sparse model: every folded DENSIFY output equals what LiteRT materializes for it."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    pose = reference_model("pose_detection")
    graph = read_model(pose).main
    targets = [op.outputs[0] for op in graph.ops if op.code == "DENSIFY"]
    assert targets
    folded = fold_constants(graph)
    assert not any(op.code in ("DENSIFY", "DEQUANTIZE") for op in folded.ops)
    # Without XNNPACK: it consumes the sparse weights itself and leaves LiteRT's DENSIFY outputs unwritten.
    ref = Interpreter(model_content=pose, experimental_preserve_all_tensors=True,
                      experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    ref.allocate_tensors()
    ref.invoke()
    for t in targets:
        np.testing.assert_array_equal(folded.tensors[t].data, ref.get_tensor(t), graph.tensors[t].name)
    # The dequantized (fp16 -> fp32) weights after them, too.
    for op in graph.ops:
        if op.code == "DEQUANTIZE" and op.inputs[0] in targets:
            np.testing.assert_array_equal(folded.tensors[op.outputs[0]].data, ref.get_tensor(op.outputs[0]))


def _shape_chain_model() -> tuple[bytes, int]:
    """Keras-style flatten: reshape(x, [shape(x)[0], -1]) then a GPU op."""
    shape = (2, 3, 4, 5)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    s = mb.op("SHAPE", [x], (4,), {"out_type": 2}, dtype=np.int32)
    one = [mb.const(name, [v], np.int32) for name, v in (("b", 0), ("e", 1), ("st", 1))]
    batch = mb.op("STRIDED_SLICE", [s, *one], (), {"shrink_axis_mask": 1}, dtype=np.int32)
    target = mb.op("PACK", [batch, mb.const("minus1", np.int32(-1))], (2,), {"values_count": 2, "axis": 0},
                   dtype=np.int32)
    flat = mb.op("RESHAPE", [x, target], (2, 60))
    mb.output(mb.op("RELU", [flat], (2, 60)))
    return mb.build(), target


def test_shape_chain_folds_and_runs_all_on_gpu() -> None:
    model, target = _shape_chain_model()
    folded = fold_constants(read_model(model).main)
    assert [op.code for op in folded.ops] == ["RESHAPE", "RELU"]
    np.testing.assert_array_equal(folded.tensors[target].data, np.array([2, -1], np.int32))
    it = assert_matches_litert(model)
    assert _codes(it) == ["RESHAPE", "RELU"]


def test_folded_graph_output_is_served_from_the_host() -> None:
    """A model output that folds (here SHAPE and a SHAPE-derived product) comes back as the constant."""
    mb = ModelBuilder()
    x = mb.input("x", (3, 5, 7))
    s = mb.op("SHAPE", [x], (3,), {"out_type": 2}, dtype=np.int32)
    n = mb.op("REDUCE_PROD", [s, mb.const("ax", [0], np.int32)], (), {"keep_dims": False}, dtype=np.int32)
    mb.output(s, n, mb.op("NEG", [x], (3, 5, 7)))
    model = mb.build()
    it = assert_matches_litert(model)
    assert _codes(it) == ["NEG"]
    feeds = {x: np.ones((3, 5, 7), np.float32)}
    got, _ = run_gpuengine(model, feeds)
    ref = run_litert(model, feeds)
    assert got[s].dtype == np.int32 and got[n].dtype == np.int32
    np.testing.assert_array_equal(got[s], ref[s])
    np.testing.assert_array_equal(got[n], np.int32(105))


def _const_op(code: str, inputs: list[np.ndarray], out_shape, options=None, dtype=None):  # noqa: ANN001
    mb = ModelBuilder()
    ins = [mb.const(f"in{i}", v) for i, v in enumerate(inputs)]
    out = mb.op(code, ins, out_shape, options, dtype=dtype or inputs[0].dtype)
    outs = out if isinstance(out, list) else [out]
    mb.output(*outs)
    return mb.build(), outs


I32, F32 = np.int32, np.float32


def i32(*v: int) -> np.ndarray:
    return np.array(v, I32)


def f32(*v: float) -> np.ndarray:
    return np.array(v, F32)


CASES = {
    "strided_slice_masks": ("STRIDED_SLICE", [np.arange(24, dtype=I32).reshape(2, 3, 4), i32(1, -1, 3),
                                              i32(2, 0, 0), i32(1, -1, -2)],
                            (3, 2), {"begin_mask": 0, "end_mask": 2, "shrink_axis_mask": 1}),
    "strided_slice_begin_mask": ("STRIDED_SLICE", [np.arange(10, dtype=I32), i32(3), i32(-2), i32(2)], (4,),
                                 {"begin_mask": 1}),
    "slice": ("SLICE", [np.arange(30, dtype=F32).reshape(5, 6), i32(1, 2), i32(3, -1)], (3, 4), None),
    "pack_axis1": ("PACK", [i32(1, 2), i32(3, 4)], (2, 2), {"values_count": 2, "axis": 1}),
    "concat": ("CONCATENATION", [np.array([[1, 2]], I32), np.array([[3]], I32)], (1, 3), {"axis": -1}),
    "gather": ("GATHER", [np.arange(12, dtype=F32).reshape(3, 4), i32(2, 0, 2)], (3, 3), {"axis": 1}),
    "cast": ("CAST", [f32(-1.7, 2.9, 0.2)], (3,), None, I32),
    "div_int": ("DIV", [i32(7, -7, 7, -7), i32(2, 2, -2, -2)], (4,), None),
    "floor_div_int": ("FLOOR_DIV", [i32(7, -7, 7, -7), i32(2, 2, -2, -2)], (4,), None),
    "sub_broadcast": ("SUB", [np.array([[5], [6]], I32), i32(1, 2, 3)], (2, 3), None),
    "mul_float": ("MUL", [f32(1.5, -2.0), f32(3.0)], (2,), None),
    "max": ("MAXIMUM", [i32(1, 5), i32(3, 2)], (2,), None),
    "min": ("MINIMUM", [f32(1.0, 5.0), f32(3.0, 2.0)], (2,), None),
    "range_int": ("RANGE", [np.array(10, I32), np.array(-3, I32), np.array(-4, I32)], (4,), None),
    "range_float": ("RANGE", [np.array(0.5, F32), np.array(2.0, F32), np.array(0.4, F32)], (4,), None),
    "fill": ("FILL", [i32(2, 3), np.array(1.25, F32)], (2, 3), None, F32),
    "transpose": ("TRANSPOSE", [np.arange(6, dtype=F32).reshape(1, 2, 3), i32(2, 0, 1)], (3, 1, 2), None),
    "reduce_prod_keep": ("REDUCE_PROD", [np.arange(1, 7, dtype=I32).reshape(2, 3), i32(-1)], (2, 1),
                         {"keep_dims": True}),
    "expand_dims": ("EXPAND_DIMS", [i32(1, 2), np.array(0, I32)], (1, 2), None),
    "squeeze": ("SQUEEZE", [np.array([[3], [4]], F32)], (2,), {"squeeze_dims": [1]}),
    "reshape": ("RESHAPE", [np.arange(6, dtype=F32), i32(3, -1)], (3, 2), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_folders_match_litert(name: str) -> None:
    """Each numpy folder equals running the op on LiteRT; the folded constant output is served correctly."""
    code, inputs, shape, options, *dtype = CASES[name]
    model, outs = _const_op(code, inputs, shape, options, dtype[0] if dtype else None)
    graph = read_model(model).main
    op = graph.ops[0]
    values = FOLDERS[code](op, graph)
    ref = _evaluate_litert(op, graph)
    assert ref is not None
    for v, r in zip(values, ref):
        assert v.shape == r.shape
        np.testing.assert_array_equal(np.asarray(v).astype(r.dtype), r)
    assert fold_constants(graph).ops == []
    got, _ = run_gpuengine(model, {})
    lite = run_litert(model, {})
    for t in outs:
        assert got[t].dtype == lite[t].dtype
        np.testing.assert_array_equal(got[t], lite[t])


def test_unpack_folds_to_several_constants() -> None:
    model, outs = _const_op("UNPACK", [np.arange(6, dtype=I32).reshape(3, 2)], [(3,), (3,)],
                            {"num": 2, "axis": 1})
    got, _ = run_gpuengine(model, {})
    lite = run_litert(model, {})
    for t in outs:
        np.testing.assert_array_equal(got[t], lite[t])


def test_other_constant_ops_fold_through_litert(monkeypatch: pytest.MonkeyPatch) -> None:
    """No numpy folder for TILE or SQRT: LiteRT evaluates the single op; without LiteRT it stays an op."""
    mb = ModelBuilder()
    x = mb.input("x", (2, 6))
    c = mb.const("c", np.array([[1.0, 4.0, 9.0]], F32))
    tiled = mb.op("TILE", [c, mb.const("m", [2, 2], I32)], (2, 6))
    root = mb.op("SQRT", [tiled], (2, 6))
    mb.output(mb.op("ADD", [x, root], (2, 6)))
    model = mb.build()
    assert [op.code for op in fold_constants(read_model(model).main).ops] == ["ADD"]
    assert_matches_litert(model)
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    assert [op.code for op in fold_constants(read_model(model).main).ops] == ["TILE", "SQRT", "ADD"]


def test_numpy_shape_mismatch_defers_to_litert() -> None:
    """A declared shape the numpy result disagrees with is never trusted blindly: LiteRT decides."""
    model, outs = _const_op("ADD", [np.array([1, 2], I32), np.array([3, 4], I32)], (2,), None)
    graph = read_model(model).main
    graph.tensors[outs[0]].shape = (1, 2)
    assert fold_constants(graph).ops  # both numpy and LiteRT give (2,): left in place


def test_shape_chain_refolds_after_resize() -> None:
    """SHAPE folds the shape known now; resize_tensor_input rebuilds, so the chain folds to the new batch."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    model, _ = _shape_chain_model()
    x = np.random.default_rng(3).uniform(-1, 1, (4, 3, 4, 5)).astype(np.float32)
    results = []
    for cls in (LiteRT, Interpreter):
        it = cls(model_content=model)
        it.resize_tensor_input(0, [4, 3, 4, 5])
        it.allocate_tensors()
        it.set_tensor(0, x)
        it.invoke()
        results.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert results[1].shape == (4, 60)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)
