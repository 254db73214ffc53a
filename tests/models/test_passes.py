"""The optional graph passes, each as a pure Graph -> Graph function on small built models: the graph change
it must make (or must not), that its input graph is left untouched, and that the whole model (all passes,
fusion) still matches LiteRT."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import assert_matches_litert, random_inputs, run_gpuengine, run_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Graph
from gpuengine.model.ops import out_size
from gpuengine.model.reader import read_model
from gpuengine.passes import pipeline
from gpuengine.passes.conv_to_fully_connected import conv_to_fully_connected
from gpuengine.passes.dilated_conv import dilated_conv
from gpuengine.passes.fold_scale_into_conv import fold_scale_into_conv
from gpuengine.passes.fuse_input_expression import fuse_input_expression
from gpuengine.passes.merge_channel_pad import merge_channel_pad
from gpuengine.passes.merge_padding import merge_padding
from gpuengine.passes.pool_to_mean import pool_to_mean
from gpuengine.passes.remove_noops import remove_noops

CONVERTERS = ("bhwc_to_phwc4", "phwc4_to_bhwc")


# -- helpers ----------------------------------------------------------------------------------------------------
def _snapshot(g: Graph) -> Any:
    """Everything a pass could mutate by accident (ops, options, tensors and their data, graph I/O)."""
    ops = [(o.code, tuple(o.inputs), tuple(o.outputs), repr(o.options)) for o in g.ops]
    tensors = [(t.name, t.shape, t.dtype, None if t.data is None else np.asarray(t.data).tobytes())
               for t in g.tensors]
    return ops, tensors, tuple(g.inputs), tuple(g.outputs)


def apply(pass_fn: Callable[[Graph], Graph], model: bytes) -> Graph:
    """Run one pass on the model's main graph and check that the input graph was not mutated."""
    graph = read_model(model).main
    before = _snapshot(graph)
    out = pass_fn(graph)
    assert out is not graph
    assert _snapshot(graph) == before, f"{pass_fn.__name__} mutated its input graph"
    return out


def codes(g: Graph) -> list[str]:
    return [op.code for op in g.ops]


def planned(it: Any) -> list[str]:
    """Op codes of the graph the engine actually ran (after all passes)."""
    return codes(it.compiled.plan.graph)


def kernels(it: Any) -> list[Any]:
    """The compute dispatches of every GPU partition, without the layout converters."""
    return [d.spec for p in it.compiled.programs for d in getattr(p, "dispatches", [])
            if d.spec.shader not in CONVERTERS]


def weights(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def conv(mb: ModelBuilder, x: int, shape: tuple[int, ...], oc: int, k: int = 3, padding: str = "SAME",
         act: str = "NONE", stride: int = 1, code: str = "CONV_2D", mult: int = 1, seed: int = 0,
         bias: bool = True) -> tuple[int, tuple[int, ...]]:
    """A CONV_2D or DEPTHWISE_CONV_2D (oc = c * mult) with random weights; returns (tensor, shape)."""
    rng = np.random.default_rng(seed)
    b, h, w, c = shape
    mode = 0 if padding == "SAME" else 1
    opts: dict[str, Any] = {"padding": padding, "stride_h": stride, "stride_w": stride,
                            "fused_activation_function": act}
    if code == "DEPTHWISE_CONV_2D":
        oc = c * mult
        wt = weights(rng, 1, k, k, oc)
        opts["depth_multiplier"] = mult
    else:
        wt = weights(rng, oc, k, k, c)
    ins = [x, mb.const(f"w{len(mb.ops)}", wt)]
    if bias:
        ins.append(mb.const(f"b{len(mb.ops)}", weights(rng, oc)))
    out = (b, out_size(mode, h, k, stride), out_size(mode, w, k, stride), oc)
    return mb.op(code, ins, out, opts), out


# -- remove_noops -----------------------------------------------------------------------------------------------
X = (1, 4, 5, 3)


def _i32(mb: ModelBuilder, name: str, values: Any) -> int:
    return mb.const(name, np.array(values, np.int32))


NOOPS: dict[str, Callable[[ModelBuilder, int], int]] = {
    "reshape": lambda mb, x: mb.op("RESHAPE", [x, _i32(mb, "s", X)], X),
    "concat_single": lambda mb, x: mb.op("CONCATENATION", [x], X, {"axis": 3}),
    "resize_bilinear": lambda mb, x: mb.op("RESIZE_BILINEAR", [x, _i32(mb, "s", X[1:3])], X),
    "resize_bilinear_half_pixel": lambda mb, x: mb.op("RESIZE_BILINEAR", [x, _i32(mb, "s", X[1:3])], X,
                                                      {"half_pixel_centers": True}),
    "resize_bilinear_align_corners": lambda mb, x: mb.op("RESIZE_BILINEAR", [x, _i32(mb, "s", X[1:3])], X,
                                                         {"align_corners": True}),
    "resize_nearest": lambda mb, x: mb.op("RESIZE_NEAREST_NEIGHBOR", [x, _i32(mb, "s", X[1:3])], X),
    "pad_zero": lambda mb, x: mb.op("PAD", [x, _i32(mb, "p", np.zeros((4, 2)))], X),
    "padv2_zero": lambda mb, x: mb.op("PADV2", [x, _i32(mb, "p", np.zeros((4, 2))),
                                                 mb.const("v", np.array(5.0, np.float32))], X),
    "transpose_identity": lambda mb, x: mb.op("TRANSPOSE", [x, _i32(mb, "perm", [0, 1, 2, 3])], X),
    "slice_full_minus_one": lambda mb, x: mb.op("SLICE", [x, _i32(mb, "b", [0] * 4), _i32(mb, "n", [-1] * 4)], X),
    "slice_full": lambda mb, x: mb.op("SLICE", [x, _i32(mb, "b", [0] * 4), _i32(mb, "n", X)], X),
    "strided_slice_full": lambda mb, x: mb.op("STRIDED_SLICE", [x, _i32(mb, "b", [0] * 4), _i32(mb, "e", X),
                                                                _i32(mb, "s", [1] * 4)], X),
    "strided_slice_masks": lambda mb, x: mb.op("STRIDED_SLICE", [x, _i32(mb, "b", [0, 1, 2, 0]),
                                                                 _i32(mb, "e", [0] * 4), _i32(mb, "s", [1] * 4)],
                                               X, {"begin_mask": 15, "end_mask": 15}),
}


@pytest.mark.parametrize("case", sorted(NOOPS))
def test_remove_noop(case: str) -> None:
    mb = ModelBuilder()
    x = mb.input("x", X)
    y = NOOPS[case](mb, x)
    mb.output(mb.op("RELU", [y], X))
    model = mb.build()
    out = apply(remove_noops, model)
    assert codes(out) == ["RELU"]
    assert out.ops[0].inputs == [0]  # the RELU now reads x directly
    it = assert_matches_litert(model, tol=1e-6)
    assert planned(it) == ["RELU"]


def test_remove_noop_chain() -> None:
    """Consecutive no-ops all go: each bypass rewires readers that the next one is matched against."""
    mb = ModelBuilder()
    x = mb.input("x", X)
    y = NOOPS["reshape"](mb, x)
    y = mb.op("TRANSPOSE", [y, _i32(mb, "perm2", [0, 1, 2, 3])], X)
    y = mb.op("PAD", [y, _i32(mb, "p2", np.zeros((4, 2)))], X)
    mb.output(mb.op("TANH", [y], X))
    model = mb.build()
    assert codes(apply(remove_noops, model)) == ["TANH"]
    assert planned(assert_matches_litert(model)) == ["TANH"]


def test_remove_single_input_add() -> None:
    """LiteRT refuses a one-input ADD, so only the graph change is checked (the engine then runs it)."""
    mb = ModelBuilder()
    x = mb.input("x", X)
    y = mb.op("ADD", [x], X)
    mb.output(mb.op("RELU", [y], X))
    out = apply(remove_noops, mb.build())
    assert codes(out) == ["RELU"] and out.ops[0].inputs == [0]


def test_single_input_add_with_activation_kept() -> None:
    mb = ModelBuilder()
    x = mb.input("x", X)
    y = mb.op("ADD", [x], X, {"fused_activation_function": "RELU"})
    mb.output(mb.op("TANH", [y], X))
    assert codes(apply(remove_noops, mb.build())) == ["ADD", "TANH"]


@pytest.mark.parametrize("case", ["reshape", "transpose_identity", "pad_zero"])
def test_noop_kept_when_graph_output(case: str) -> None:
    """A graph output's tensor index is what the API exposes: the op producing it stays."""
    mb = ModelBuilder()
    x = mb.input("x", X)
    r = mb.op("RELU", [x], X)
    y = NOOPS[case](mb, r)
    mb.output(y)
    model = mb.build()
    out = apply(remove_noops, model)
    assert len(out.ops) == 2 and out.outputs == [y]
    assert_matches_litert(model, tol=1e-6)


def test_strided_slice_with_runtime_strides_kept() -> None:
    """Same shape, but strides fed at run time may reverse an axis: not a no-op (was dropped; bug fixed)."""
    mb = ModelBuilder()
    x = mb.input("x", X)
    strides = mb.input("strides", (4,), np.int32)
    y = mb.op("STRIDED_SLICE", [x, _i32(mb, "b", [0, -1, 0, 0]), _i32(mb, "e", [1, -5, 5, 3]), strides], X,
              {"end_mask": 1})
    mb.output(mb.op("RELU", [y], X))
    model = mb.build()
    assert codes(apply(remove_noops, model)) == ["STRIDED_SLICE", "RELU"]
    feeds = {x: np.random.default_rng(0).standard_normal(X).astype(np.float32),
             strides: np.array([1, -1, 1, 1], np.int32)}
    assert_matches_litert(model, feeds, tol=1e-6, all_gpu=False)


KEPT: dict[str, tuple[Callable[[ModelBuilder, int], int], tuple[int, ...], bool]] = {
    # name -> (builder, output shape, runs on the GPU)
    "reshape_other_shape": (lambda mb, x: mb.op("RESHAPE", [x, _i32(mb, "s", (1, 20, 3))], (1, 20, 3)),
                            (1, 20, 3), True),
    "pad_nonzero": (lambda mb, x: mb.op("PAD", [x, _i32(mb, "p", [[0, 0], [1, 0], [0, 2], [0, 0]])], (1, 5, 7, 3)),
                    (1, 5, 7, 3), True),
    "transpose_same_shape": (lambda mb, x: mb.op("TRANSPOSE", [x, _i32(mb, "perm", [0, 2, 1, 3])], (1, 5, 4, 3)),
                             (1, 5, 4, 3), True),
    "transpose_square": (lambda mb, x: mb.op("TRANSPOSE", [x, _i32(mb, "perm", [0, 1, 2, 3][::-1])], (3, 5, 4, 1)),
                         (3, 5, 4, 1), True),
    "slice_partial": (lambda mb, x: mb.op("SLICE", [x, _i32(mb, "b", [0, 1, 0, 0]), _i32(mb, "n", [-1, 2, -1, -1])],
                                          (1, 2, 5, 3)), (1, 2, 5, 3), True),
    "strided_slice_reversed": (lambda mb, x: mb.op("STRIDED_SLICE", [x, _i32(mb, "b", [0, -1, 0, 0]),
                                                                     _i32(mb, "e", [1, -5, 5, 3]),
                                                                     _i32(mb, "s", [1, -1, 1, 1])], X,
                                                   {"end_mask": 1}), X, True),
    "resize_other_size": (lambda mb, x: mb.op("RESIZE_BILINEAR", [x, _i32(mb, "s", [8, 10])], (1, 8, 10, 3)),
                          (1, 8, 10, 3), True),
}


@pytest.mark.parametrize("case", sorted(KEPT))
def test_non_identity_kept(case: str) -> None:
    build, shape, gpu = KEPT[case]
    mb = ModelBuilder()
    x = mb.input("x", X)
    y = build(mb, x)
    mb.output(mb.op("RELU", [y], shape))
    model = mb.build()
    out = apply(remove_noops, model)
    assert len(out.ops) == 2
    it = assert_matches_litert(model, tol=1e-6, all_gpu=gpu)
    assert len(planned(it)) == 2


# -- fold_scale_into_conv -------------------------------------------------------------------------------------
def _scale(kind: str, channels: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "scalar":
        return np.array(rng.uniform(0.5, 2.0), np.float32)
    if kind == "scalar_1d":
        return rng.uniform(0.5, 2.0, (1,)).astype(np.float32)
    if kind == "channel_4d":
        return rng.uniform(-2.0, 2.0, (1, 1, 1, channels)).astype(np.float32)
    return rng.uniform(-2.0, 2.0, (channels,)).astype(np.float32)


def _conv_like(mb: ModelBuilder, code: str, x: int, shape: tuple[int, ...], mult: int = 1,
               act: str = "NONE") -> tuple[int, tuple[int, ...]]:
    rng = np.random.default_rng(3)
    if code == "FULLY_CONNECTED":
        o = 6
        ins = [x, mb.const("fc_w", weights(rng, o, shape[-1])), mb.const("fc_b", weights(rng, o))]
        return mb.op(code, ins, (shape[0], o), {"fused_activation_function": act}), (shape[0], o)
    if code == "TRANSPOSE_CONV":
        o, (b, h, w, c) = 5, shape
        out = (b, 2 * h, 2 * w, o)
        ins = [_i32(mb, "oshape", out), mb.const("tw", weights(rng, o, 3, 3, c)), x, mb.const("tb", weights(rng, o))]
        return mb.op(code, ins, out, {"padding": "SAME", "stride_h": 2, "stride_w": 2,
                                      "fused_activation_function": act}), out
    return conv(mb, x, shape, 5, code=code, mult=mult, act=act)


FOLD_AFTER = [("CONV_2D", 1), ("DEPTHWISE_CONV_2D", 1), ("DEPTHWISE_CONV_2D", 2), ("FULLY_CONNECTED", 1),
              ("TRANSPOSE_CONV", 1)]


@pytest.mark.parametrize("code,mult", FOLD_AFTER)
@pytest.mark.parametrize("binary", ["MUL", "ADD"])
@pytest.mark.parametrize("kind", ["channel", "channel_4d", "scalar", "scalar_1d"])
def test_fold_after(code: str, mult: int, binary: str, kind: str) -> None:
    shape = (2, 7) if code == "FULLY_CONNECTED" else (1, 6, 5, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y, out = _conv_like(mb, code, x, shape, mult)
    value = _scale(kind, out[-1])
    if kind == "channel_4d" and len(out) == 2:
        value = value.reshape(1, -1)
    z = mb.op(binary, [y, mb.const("k", value)] if kind != "scalar" else [mb.const("k", value), y], out,
              {"fused_activation_function": "RELU6"})
    mb.output(z)
    model = mb.build()
    g = apply(fold_scale_into_conv, model)
    assert codes(g) == [code]
    assert g.ops[0].outputs == [z]
    assert g.ops[0].opt("fused_activation_function") == 3  # the binary op's RELU6 moved onto the conv
    it = assert_matches_litert(model, tol=1e-5)
    assert planned(it) == [code]


@pytest.mark.parametrize("code,mult", [("CONV_2D", 1), ("DEPTHWISE_CONV_2D", 1), ("DEPTHWISE_CONV_2D", 2)])
@pytest.mark.parametrize("kind", ["channel", "scalar"])
def test_fold_before(code: str, mult: int, kind: str) -> None:
    shape = (1, 6, 5, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    m = mb.op("MUL", [x, mb.const("k", _scale(kind, 3))], shape)
    y, _ = conv(mb, m, shape, 5, code=code, mult=mult, padding="VALID")
    mb.output(y)
    model = mb.build()
    g = apply(fold_scale_into_conv, model)
    assert codes(g) == [code] and g.ops[0].inputs[0] == x
    it = assert_matches_litert(model, tol=1e-5)
    assert planned(it) == [code]


def test_fold_chain_mul_then_add() -> None:
    """Batch norm as MUL then ADD: both fold, one after the other."""
    shape = (1, 6, 5, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y, out = conv(mb, x, shape, 5)
    y = mb.op("MUL", [y, mb.const("s", _scale("channel", 5))], out)
    mb.output(mb.op("ADD", [y, mb.const("t", _scale("channel", 5, seed=2))], out))
    model = mb.build()
    assert codes(apply(fold_scale_into_conv, model)) == ["CONV_2D"]
    assert planned(assert_matches_litert(model, tol=1e-5)) == ["CONV_2D"]


def _fold_refused(variant: str) -> bytes:
    shape = (1, 6, 5, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y, out = conv(mb, x, shape, 5, act="RELU" if variant == "conv_activation" else "NONE")
    if variant == "not_per_channel":
        value = np.random.default_rng(0).uniform(0.5, 2, (1, 1, out[2], 1)).astype(np.float32)
    elif variant == "per_pixel":
        value = np.random.default_rng(0).uniform(0.5, 2, out[1:]).astype(np.float32)
    else:
        value = _scale("channel", 5)
    z = mb.op("MUL", [y, mb.const("k", value)], out)
    mb.output(z)
    if variant == "two_consumers":
        mb.output(mb.op("TANH", [y], out))
    if variant == "conv_is_output":
        mb.output(y)
    return mb.build()


@pytest.mark.parametrize("variant", ["conv_activation", "two_consumers", "conv_is_output", "not_per_channel",
                                     "per_pixel"])
def test_fold_refused(variant: str) -> None:
    model = _fold_refused(variant)
    g = apply(fold_scale_into_conv, model)
    assert codes(g)[:2] == ["CONV_2D", "MUL"]
    assert_matches_litert(model, tol=1e-5)


def test_fold_before_refused_when_mul_has_other_reader() -> None:
    shape = (1, 6, 5, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    m = mb.op("MUL", [x, mb.const("k", _scale("channel", 3))], shape)
    y, _ = conv(mb, m, shape, 5)
    mb.output(y, mb.op("RELU", [m], shape))
    model = mb.build()
    assert codes(apply(fold_scale_into_conv, model)) == ["MUL", "CONV_2D", "RELU"]
    assert_matches_litert(model, tol=1e-5)


@pytest.mark.parametrize("act", ["NONE", "RELU"])
def test_fold_after_custom_transpose_conv(act: str) -> None:
    """MediaPipe's Convolution2DTransposeBias has no options: a MUL with a fused activation cannot fold
    (it crashed the load before the fix); without one it folds."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    ins = [x, mb.const("w", weights(rng, 5, 3, 3, 3)), mb.const("b", weights(rng, 5))]
    y = mb.op("Convolution2DTransposeBias", ins, (1, 8, 8, 5), custom_options=struct.pack("<3i", 1, 2, 2))
    mb.output(mb.op("MUL", [y, mb.const("k", _scale("channel", 5))], (1, 8, 8, 5),
                    {"fused_activation_function": act}))
    model = mb.build()
    want = ["Convolution2DTransposeBias"] + (["MUL"] if act != "NONE" else [])
    assert codes(apply(fold_scale_into_conv, model)) == want
    assert planned(assert_matches_litert(model, tol=1e-5)) == want


# -- merge_padding ----------------------------------------------------------------------------------------------
def _pad_model(code: str = "CONV_2D", pads: Any = ((0, 0), (1, 2), (2, 1), (0, 0)), padding: str = "VALID",
               pad_code: str = "PAD", value: float = 0.0, readers: int = 1, mult: int = 1) -> bytes:
    shape = (1, 7, 6, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    padded = tuple(n + a + b for n, (a, b) in zip(shape, pads))
    ins = [x, _i32(mb, "pads", pads)]
    if pad_code == "PADV2":
        ins.append(mb.const("value", np.array(value, np.float32)))
    p = mb.op(pad_code, ins, padded)
    for k in range(readers):
        y, _ = conv(mb, p, padded, 4, code=code, padding=padding, mult=mult, seed=k, act="RELU")
        mb.output(y)
    return mb.build()


@pytest.mark.parametrize("code,mult", [("CONV_2D", 1), ("DEPTHWISE_CONV_2D", 1), ("DEPTHWISE_CONV_2D", 2)])
@pytest.mark.parametrize("pad_code", ["PAD", "PADV2"])
def test_merge_padding(code: str, mult: int, pad_code: str) -> None:
    model = _pad_model(code, pad_code=pad_code, mult=mult)
    g = apply(merge_padding, model)
    assert codes(g) == [code]
    assert g.ops[0].inputs[0] == 0 and tuple(g.ops[0].opt("explicit_padding")) == (1, 2, 2, 1)
    it = assert_matches_litert(model)
    assert planned(it) == [code]
    _, plain = run_gpuengine(model, random_inputs(model), optimize=False)
    assert it.compiled.dispatches == plain.compiled.dispatches - 1


def test_merge_padding_two_depthwise_readers() -> None:
    model = _pad_model("DEPTHWISE_CONV_2D", readers=2)
    g = apply(merge_padding, model)
    assert codes(g) == ["DEPTHWISE_CONV_2D"] * 2
    assert all(tuple(op.opt("explicit_padding")) == (1, 2, 2, 1) and op.inputs[0] == 0 for op in g.ops)
    assert planned(assert_matches_litert(model)) == ["DEPTHWISE_CONV_2D"] * 2


@pytest.mark.parametrize("variant", ["same_conv", "channel_pad", "batch_pad", "padv2_nonzero"])
def test_merge_padding_refused(variant: str) -> None:
    pads: Any = ((0, 0), (1, 2), (2, 1), (0, 0))
    kwargs: dict[str, Any] = {}
    if variant == "same_conv":
        kwargs["padding"] = "SAME"
    elif variant == "channel_pad":
        pads = ((0, 0), (1, 1), (1, 1), (0, 2))
    elif variant == "batch_pad":
        pads = ((1, 0), (1, 1), (1, 1), (0, 0))
    else:
        kwargs.update(pad_code="PADV2", value=0.5)
    model = _pad_model(pads=pads, **kwargs)
    g = apply(merge_padding, model)
    assert codes(g)[0] in ("PAD", "PADV2") and g.ops[1].opt("explicit_padding") is None
    assert_matches_litert(model)


# -- merge_channel_pad ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("c_in,c_out", [(3, 7), (6, 10), (4, 8), (5, 6)])
@pytest.mark.parametrize("pad_first", [False, True])
def test_merge_channel_pad(c_in: int, c_out: int, pad_first: bool) -> None:
    shape = (1, 6, 5, c_in)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y, out = conv(mb, x, shape, c_out)
    p = mb.op("PAD", [x, _i32(mb, "pads", [[0, 0], [0, 0], [0, 0], [0, c_out - c_in]])], out)
    z = mb.op("ADD", [p, y] if pad_first else [y, p], out)
    mb.output(z)
    model = mb.build()
    g = apply(merge_channel_pad, model)
    assert codes(g) == ["CONV_2D", "ADD"]
    assert g.ops[1].opt("zero_extend") is True and x in g.ops[1].inputs
    it = assert_matches_litert(model)
    assert "PAD" not in planned(it)


def test_merge_channel_pad_refused_for_spatial_pad() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 5, 3))
    x2 = mb.input("x2", (1, 7, 5, 3))
    y, out = conv(mb, x2, (1, 7, 5, 3), 7)
    p = mb.op("PAD", [x, _i32(mb, "pads", [[0, 0], [1, 0], [0, 0], [0, 4]])], out)
    mb.output(mb.op("ADD", [y, p], out))
    model = mb.build()
    assert "PAD" in codes(apply(merge_channel_pad, model))
    assert "PAD" in planned(assert_matches_litert(model))


# -- pool_to_mean -----------------------------------------------------------------------------------------------
def _pool_model(h: int, w: int, act: str = "NONE", c: int = 5, padding: str = "VALID") -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (2, h, w, c))
    mb.output(mb.op("AVERAGE_POOL_2D", [x], (2, 1, 1, c), {"filter_height": h, "filter_width": w, "stride_h": h,
                                                           "stride_w": w, "padding": padding,
                                                           "fused_activation_function": act}))
    return mb.build()


@pytest.mark.parametrize("h,w,padding", [(8, 8, "VALID"), (16, 4, "VALID"), (9, 11, "SAME"), (13, 13, "VALID")])
def test_pool_to_mean(h: int, w: int, padding: str) -> None:
    model = _pool_model(h, w, padding=padding)
    g = apply(pool_to_mean, model)
    assert codes(g) == ["MEAN"]
    assert g.ops[0].opt("keep_dims") is True
    assert planned(assert_matches_litert(model, tol=1e-5)) == ["MEAN"]


@pytest.mark.parametrize("h,w,act", [(4, 4, "NONE"), (7, 9, "NONE"), (8, 8, "RELU")])
def test_pool_kept(h: int, w: int, act: str) -> None:
    model = _pool_model(h, w, act)
    assert codes(apply(pool_to_mean, model)) == ["AVERAGE_POOL_2D"]
    assert planned(assert_matches_litert(model, tol=1e-5)) == ["AVERAGE_POOL_2D"]


def test_partial_pool_kept() -> None:
    """A 8x8 filter over a 16x8 map is not global."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 16, 8, 3))
    mb.output(mb.op("AVERAGE_POOL_2D", [x], (1, 2, 1, 3), {"filter_height": 8, "filter_width": 8, "stride_h": 8,
                                                           "stride_w": 8, "padding": "VALID"}))
    model = mb.build()
    assert codes(apply(pool_to_mean, model)) == ["AVERAGE_POOL_2D"]
    assert_matches_litert(model, tol=1e-5)


# -- dilated_conv -----------------------------------------------------------------------------------------------
def dilated_model(code: str, b: int, h: int, w: int, c: int, k: tuple[int, int], block: tuple[int, int],
                  same: bool = True, oc: int = 5, mult: int = 1, act: str = "NONE",
                  pads: Any = None, crops: Any = None, stride: int = 1, conv_dilation: int = 1,
                  b2s_block: tuple[int, int] | None = None, conv_output: bool = False, bn: bool = False) -> bytes:
    """TensorFlow's dilated conv: SPACE_TO_BATCH (pads = SAME padding of the dilated filter, plus what makes
    the size divisible by the block) -> VALID conv -> BATCH_TO_SPACE (crops = that extra)."""
    if pads is None:
        pads, crops = [], []
        for size, kk, bs in ((h, k[0], block[0]), (w, k[1], block[1])):
            total = (kk - 1) * bs if same else 0
            start, end = total // 2, total - total // 2
            extra = -(size + start + end) % bs
            pads.append((start, end + extra))
            crops.append((0, extra))
    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    x = mb.input("x", (b, h, w, c))
    hs, ws = (h + sum(pads[0])) // block[0], (w + sum(pads[1])) // block[1]
    s2b = mb.op("SPACE_TO_BATCH_ND", [x, _i32(mb, "block", block), _i32(mb, "pads", pads)],
                (b * block[0] * block[1], hs, ws, c))
    eff_h, eff_w = (k[0] - 1) * conv_dilation + 1, (k[1] - 1) * conv_dilation + 1
    hy, wy = (hs - eff_h) // stride + 1, (ws - eff_w) // stride + 1
    opts: dict[str, Any] = {"padding": "VALID", "stride_h": stride, "stride_w": stride,
                            "dilation_h_factor": conv_dilation, "dilation_w_factor": conv_dilation,
                            "fused_activation_function": act}
    if code == "DEPTHWISE_CONV_2D":
        oc = c * mult
        wt = weights(rng, 1, *k, oc)
        opts["depth_multiplier"] = mult
    else:
        wt = weights(rng, oc, *k, c)
    y = mb.op(code, [s2b, mb.const("w", wt), mb.const("bias", weights(rng, oc))],
              (b * block[0] * block[1], hy, wy, oc), opts)
    bb = b2s_block or block
    out = (b * block[0] * block[1] // (bb[0] * bb[1]), hy * bb[0] - sum(crops[0]), wy * bb[1] - sum(crops[1]), oc)
    z = mb.op("BATCH_TO_SPACE_ND", [y, _i32(mb, "block2", bb), _i32(mb, "crops", crops)], out)
    if bn:
        z = mb.op("MUL", [z, mb.const("bn", _scale("channel", oc))], out)
    mb.output(z)
    if conv_output:
        mb.output(y)
    return mb.build()


DILATED = [
    # code, batch, h, w, c, kernel, block, same, oc/mult, act
    ("CONV_2D", 1, 9, 9, 3, (3, 3), (2, 2), True, 5, "NONE"),
    ("CONV_2D", 1, 10, 7, 5, (3, 3), (2, 2), True, 4, "RELU"),
    ("CONV_2D", 2, 12, 11, 7, (3, 3), (3, 3), True, 6, "NONE"),
    ("CONV_2D", 1, 13, 12, 4, (5, 3), (2, 3), True, 5, "RELU6"),
    ("CONV_2D", 1, 12, 12, 3, (3, 3), (4, 4), False, 5, "NONE"),
    ("CONV_2D", 1, 11, 9, 6, (2, 2), (2, 2), True, 3, "NONE"),
    ("CONV_2D", 1, 7, 6, 3, (1, 1), (2, 2), True, 5, "NONE"),
    ("CONV_2D", 1, 15, 14, 8, (3, 3), (2, 2), False, 8, "NONE"),
    ("DEPTHWISE_CONV_2D", 1, 9, 9, 3, (3, 3), (2, 2), True, 1, "NONE"),
    ("DEPTHWISE_CONV_2D", 1, 10, 13, 5, (3, 3), (4, 4), True, 1, "RELU"),
    ("DEPTHWISE_CONV_2D", 2, 11, 11, 3, (3, 3), (2, 2), True, 2, "NONE"),
    ("DEPTHWISE_CONV_2D", 1, 14, 16, 7, (5, 5), (2, 3), False, 1, "NONE"),
    ("DEPTHWISE_CONV_2D", 1, 16, 16, 4, (3, 3), (8, 8), True, 1, "NONE"),
]


@pytest.mark.parametrize("case", DILATED, ids=lambda c: "-".join(map(str, c)).replace(" ", ""))
def test_dilated_conv(case: tuple[Any, ...]) -> None:
    code, b, h, w, c, k, block, same, n, act = case
    kwargs = {"mult": n} if code == "DEPTHWISE_CONV_2D" else {"oc": n}
    model = dilated_model(code, b, h, w, c, k, block, same, act=act, **kwargs)
    g = apply(dilated_conv, model)
    assert codes(g) == [code]
    op = g.ops[0]
    assert (op.opt("dilation_h_factor"), op.opt("dilation_w_factor")) == block
    assert op.inputs[0] == 0 and op.outputs == read_model(model).main.outputs
    it = assert_matches_litert(model, tol=1e-5)
    assert planned(it) == [code]
    assert len(kernels(it)) == 1


@pytest.mark.parametrize("code", ["CONV_2D", "DEPTHWISE_CONV_2D"])
@pytest.mark.parametrize("pads,crops", [
    (((3, 1), (1, 3)), ((0, 0), (0, 1))),  # asymmetric: explicit padding (3, 1, 1, 2)
    (((2, 2), (2, 2)), ((1, 1), (0, 0))),  # crops eat some padding: (1, 1, 2, 2)
    (((0, 2), (2, 0)), ((0, 0), (0, 0))),
])
def test_dilated_conv_explicit_padding(code: str, pads: Any, crops: Any) -> None:
    model = dilated_model(code, 1, 10, 8, 3, (3, 3), (2, 2), pads=pads, crops=crops)
    g = apply(dilated_conv, model)
    assert codes(g) == [code]
    want = (pads[0][0] - crops[0][0], pads[0][1] - crops[0][1], pads[1][0] - crops[1][0], pads[1][1] - crops[1][1])
    assert tuple(g.ops[0].opt("explicit_padding")) == want
    it = assert_matches_litert(model, tol=1e-5)
    assert planned(it) == [code]


def test_dilated_conv_same_is_plain_same() -> None:
    """The usual TF pattern becomes an ordinary SAME conv, no internal option (the CPU fallback could run it)."""
    g = apply(dilated_conv, dilated_model("CONV_2D", 1, 9, 9, 3, (3, 3), (2, 2)))
    assert g.ops[0].opt("padding") == 0 and g.ops[0].opt("explicit_padding") is None


REFUSED_DILATED: dict[str, dict[str, Any]] = {
    "block_mismatch": {"b2s_block": (1, 1)},
    "strided_conv": {"stride": 2, "h": 13, "w": 13},
    "dilated_inner_conv": {"conv_dilation": 2, "h": 14, "w": 14},
    "crop_exceeds_pad": {"pads": ((0, 0), (0, 0)), "crops": ((1, 0), (0, 1)), "same": False},
    "conv_output_read": {"conv_output": True},
}


@pytest.mark.parametrize("variant", sorted(REFUSED_DILATED))
def test_dilated_conv_refused(variant: str) -> None:
    kwargs = {"h": 10, "w": 10, **REFUSED_DILATED[variant]}
    h, w = kwargs.pop("h"), kwargs.pop("w")
    model = dilated_model("CONV_2D", 1, h, w, 3, (3, 3), (2, 2), **kwargs)
    g = apply(dilated_conv, model)
    assert codes(g) == ["SPACE_TO_BATCH_ND", "CONV_2D", "BATCH_TO_SPACE_ND"]
    assert_matches_litert(model, tol=1e-5)


def test_dilated_conv_then_batch_norm_folds() -> None:
    """The pipeline order matters: the dilated conv is rebuilt first, so the MUL after BATCH_TO_SPACE folds."""
    it = assert_matches_litert(dilated_model("CONV_2D", 1, 9, 9, 3, (3, 3), (2, 2), bn=True), tol=1e-5)
    assert planned(it) == ["CONV_2D"]


# -- conv_to_fully_connected ------------------------------------------------------------------------------------
@pytest.mark.parametrize("b,c,o,stride,padding,act,bias", [
    (1, 7, 5, 1, "VALID", "NONE", True),
    (2, 3, 9, 2, "SAME", "RELU6", True),
    (1, 64, 16, 1, "SAME", "RELU", True),
    (3, 130, 33, 3, "VALID", "NONE", True),
])
def test_conv_to_fully_connected(b: int, c: int, o: int, stride: int, padding: str, act: str, bias: bool) -> None:
    """(bias: LiteRT's CONV_2D requires one; test_conv_to_fully_connected_without_bias checks the graph only.)"""
    mb = ModelBuilder()
    x = mb.input("x", (b, 1, 1, c))
    y, out = conv(mb, x, (b, 1, 1, c), o, k=1, padding=padding, act=act, stride=stride, bias=bias)
    assert out == (b, 1, 1, o)
    mb.output(y)
    model = mb.build()
    g = apply(conv_to_fully_connected, model)
    assert codes(g) == ["FULLY_CONNECTED"]
    fc = g.ops[0]
    assert fc.opt("keep_num_dims") is True and g.tensors[fc.inputs[1]].shape == (o, c)
    assert fc.opt("fused_activation_function") == read_model(model).main.ops[0].opt("fused_activation_function")
    it = assert_matches_litert(model, tol=1e-5)
    assert planned(it) == ["FULLY_CONNECTED"]


def test_conv_to_fully_connected_without_bias() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 1, 1, 6))
    y, _ = conv(mb, x, (1, 1, 1, 6), 4, k=1, bias=False)
    mb.output(y)
    model = mb.build()
    g = apply(conv_to_fully_connected, model)
    assert codes(g) == ["FULLY_CONNECTED"] and g.ops[0].inputs[2] == -1
    feeds = random_inputs(model)
    got, _ = run_gpuengine(model, feeds)
    w = read_model(model).main.tensors[1].data.reshape(4, 6)
    np.testing.assert_allclose(got[y], (feeds[x].reshape(1, 6) @ w.T).reshape(1, 1, 1, 4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["spatial_2x2", "kernel_3x3", "grouped"])
def test_conv_to_fully_connected_refused(variant: str) -> None:
    shape = (1, 2, 2, 6) if variant == "spatial_2x2" else (1, 1, 1, 6)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    if variant == "grouped":
        rng = np.random.default_rng(0)
        y = mb.op("CONV_2D", [x, mb.const("w", weights(rng, 4, 1, 1, 3)), mb.const("b", weights(rng, 4))],
                  (1, 1, 1, 4), {"padding": "VALID"})
        mb.output(y)
        model = mb.build()
        assert codes(apply(conv_to_fully_connected, model)) == ["CONV_2D"]
        return  # (LiteRT's CPU kernel has no grouped conv: graph check only)
    y, _ = conv(mb, x, shape, 4, k=3 if variant == "kernel_3x3" else 1, padding="SAME")
    mb.output(y)
    model = mb.build()
    assert codes(apply(conv_to_fully_connected, model)) == ["CONV_2D"]
    assert planned(assert_matches_litert(model, tol=1e-5)) == ["CONV_2D"]


# -- optimize=False ---------------------------------------------------------------------------------------------
def _every_pattern_model() -> bytes:
    """One model that every optional pass would change."""
    shape = (1, 8, 8, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    r = mb.op("RESHAPE", [x, _i32(mb, "s", shape)], shape)  # remove_noops
    p = mb.op("PAD", [r, _i32(mb, "pads", [[0, 0], [1, 1], [1, 1], [0, 0]])], (1, 10, 10, 3))
    y, out = conv(mb, p, (1, 10, 10, 3), 6, padding="VALID")  # merge_padding
    y = mb.op("MUL", [y, mb.const("k", _scale("channel", 6))], out)  # fold_scale_into_conv
    cp = mb.op("PAD", [x, _i32(mb, "cpads", [[0, 0], [0, 0], [0, 0], [0, 3]])], out)
    y = mb.op("ADD", [y, cp], out)  # merge_channel_pad
    g = mb.op("AVERAGE_POOL_2D", [y], (1, 1, 1, 6), {"filter_height": 8, "filter_width": 8, "stride_h": 1,
                                                      "stride_w": 1, "padding": "VALID"})
    f, _ = conv(mb, g, (1, 1, 1, 6), 4, k=1)  # conv_to_fully_connected, after pool_to_mean's MEAN
    mb.output(f)
    return mb.build()


def test_optimize_false_runs_no_optional_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _every_pattern_model()
    source = codes(read_model(model).main)
    feeds = random_inputs(model)
    ref = run_litert(model, feeds)
    got, plain = run_gpuengine(model, feeds, optimize=False)
    assert planned(plain) == source
    assert_matches_litert(model, feeds)  # optimized: every pass fired ...
    _, fast = run_gpuengine(model, feeds)
    assert planned(fast) == ["CONV_2D", "ADD", "MEAN", "FULLY_CONNECTED"]
    for t, r in ref.items():
        np.testing.assert_allclose(got[t], r, rtol=1e-4, atol=1e-4)

    def boom(graph: Graph) -> Graph:
        raise AssertionError("an optional pass ran with optimize=False")

    monkeypatch.setattr(pipeline, "OPTIONAL", [boom])
    run_gpuengine(model, feeds, optimize=False)
    with pytest.raises(AssertionError, match="optional pass ran"):
        run_gpuengine(model, feeds)


# -- fuse_input_expression ------------------------------------------------------------------------------------
def _se_block(c: int, oc: int, batch: int = 1, k: int = 1, gate_consumers: int = 1) -> bytes:
    """x -> MEAN -> 1x1 conv -> LOGISTIC = gate; MUL(x, gate) -> conv (k x k): a squeeze-excitation block."""
    mb = ModelBuilder()
    shape = (batch, 6, 5, c)
    x = mb.input("x", shape)
    pooled = mb.op("MEAN", [x, mb.const("axes", np.array([1, 2], np.int32))], (batch, 1, 1, c), {"keep_dims": True})
    squeeze, sshape = conv(mb, pooled, (batch, 1, 1, c), c, k=1, act="RELU", seed=1)
    gate = mb.op("LOGISTIC", [squeeze], sshape)
    scaled = mb.op("MUL", [x, gate], shape)
    out, _ = conv(mb, scaled, shape, oc, k=k, seed=2)
    mb.output(out)
    if gate_consumers > 1:
        mb.output(mb.op("RELU", [scaled], shape))
    return mb.build()


def _prologue(g: Graph, code: str) -> Any:
    return next(op for op in g.ops if op.code == code and op.opt("prologue"))


@pytest.mark.parametrize(("c", "oc", "batch"), [(8, 4, 1), (5, 7, 1), (12, 16, 2)])
def test_gate_mul_fuses_into_the_1x1_conv(c: int, oc: int, batch: int) -> None:
    model = _se_block(c, oc, batch)
    out = apply(fuse_input_expression, model)
    assert "MUL" not in codes(out)
    conv_op = _prologue(out, "CONV_2D")
    assert [s.op.code for s in conv_op.opt("prologue")] == ["MUL"]
    assert len(conv_op.inputs) == 4  # x, weights, bias, then the gate as a leaf
    it = assert_matches_litert(model)
    assert "MUL" not in planned(it)
    assert any("(input: MUL)" in spec.label for spec in kernels(it))


@pytest.mark.parametrize(("k", "gate_consumers"), [(3, 1), (1, 2)])
def test_gate_mul_kept_when_the_conv_cannot_take_it(k: int, gate_consumers: int) -> None:
    """A 3x3 conv has no prologue path; a MUL output read twice must be materialized."""
    model = _se_block(6, 4, k=k, gate_consumers=gate_consumers)
    assert "MUL" in codes(apply(fuse_input_expression, model))
    assert_matches_litert(model)


def _attention_block(c: int, batch: int = 1, reader: str = "MEAN") -> bytes:
    """MediaPipe selfie's decoder block: skip and up are both read elsewhere, so neither can host
    s = ADD(skip, up) (read by a MEAN) or ADD(MUL(skip, gate(s)), up) (read by a 1x1 conv)."""
    mb = ModelBuilder()
    shape = (batch, 8, 9, c)  # >= 64 pixels: pool_to_mean turns the global AVERAGE_POOL_2D into a MEAN
    x = mb.input("x", shape)
    skip = mb.op("HARD_SWISH", [x], shape)
    up, _ = conv(mb, x, shape, c, k=3, seed=3)
    s = mb.op("ADD", [skip, up], shape)
    if reader == "MEAN":
        pooled = mb.op("MEAN", [s, _i32(mb, "axes", [1, 2])], (batch, 1, 1, c), {"keep_dims": True})
    else:
        pooled = mb.op("AVERAGE_POOL_2D", [s], (batch, 1, 1, c), {"filter_height": 8, "filter_width": 9,
                                                                 "padding": "VALID", "stride_h": 1, "stride_w": 1})
    gate = mb.op("LOGISTIC", [conv(mb, pooled, (batch, 1, 1, c), c, k=1, seed=4)[0]], (batch, 1, 1, c))
    mixed = mb.op("ADD", [mb.op("MUL", [skip, gate], shape), up], shape)
    out, _ = conv(mb, mixed, shape, 9, k=1, seed=5)
    mb.output(out)
    mb.output(mb.op("RELU", [skip], shape))
    mb.output(mb.op("RELU", [up], shape))
    return mb.build()


@pytest.mark.parametrize(("c", "batch", "reader"), [(16, 1, "MEAN"), (5, 2, "MEAN"), (6, 1, "AVERAGE_POOL_2D")])
def test_attention_block_runs_no_elementwise_dispatch(c: int, batch: int, reader: str) -> None:
    model = _attention_block(c, batch, reader)
    it = assert_matches_litert(model)
    graph = it.compiled.plan.graph
    assert [s.op.code for s in _prologue(graph, "MEAN").opt("prologue")] == ["ADD"]
    assert [s.op.code for s in _prologue(graph, "CONV_2D").opt("prologue")] == ["MUL", "ADD"]
    standalone = [spec.label for spec in kernels(it) if spec.shader == "elementwise"]
    assert sorted(standalone) == ["HARD_SWISH", "RELU", "RELU"]  # on a graph input / on tensors read twice
    unfused = run_gpuengine(model, random_inputs(model, 0), optimize=False)[0]
    fused = run_gpuengine(model, random_inputs(model, 0))[0]
    for t, v in unfused.items():
        np.testing.assert_allclose(fused[t], v, rtol=1e-5, atol=1e-5)


def test_prologue_with_constant_leaves_and_activations() -> None:
    """Scalar, per-channel and full-shape constants as leaves, a fused activation and a unary op in the tree;
    a DIV whose padding lanes (0 / 0) must not leak NaN into the conv."""
    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    shape = (1, 4, 3, 5)
    x = mb.input("x", shape)
    y = mb.input("y", shape)
    t = mb.op("ADD", [x, mb.const("one", np.array(1.0, np.float32))], shape, {"fused_activation_function": "RELU"})
    t = mb.op("DIV", [t, y], shape)  # 1 / 0 in the padding lanes
    t = mb.op("MUL", [t, mb.const("pc", rng.uniform(0.5, 2, (5,)).astype(np.float32))], shape)  # inf * 0
    t = mb.op("LOG", [mb.op("SUB", [t, mb.const("full", weights(rng, *shape) * 0.1)], shape)], shape)
    mb.output(conv(mb, t, shape, 6, k=1, seed=8)[0])
    mb.output(mb.op("RELU", [x], shape))
    mb.output(mb.op("RELU", [y], shape))
    model = mb.build()
    out = apply(fuse_input_expression, model)
    assert [s.op.code for s in _prologue(out, "CONV_2D").opt("prologue")] == ["ADD", "DIV", "MUL", "SUB", "LOG"]
    feeds = {k: np.abs(v) + 0.1 for k, v in random_inputs(model, 1).items()}
    it = assert_matches_litert(model, feeds)
    assert [spec.label for spec in kernels(it) if spec.shader == "elementwise"] == ["RELU", "RELU"]


PROLOGUE_UNARY = ["RELU", "RELU6", "HARD_SWISH", "LOGISTIC", "TANH", "ABS", "NEG", "ELU"]
PROLOGUE_BINARY = ["ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"]
READERS = {  # consumer -> (code, axes, keep_dims); None: a 1x1 conv
    "conv1x1": None, "mean_hw": ("MEAN", [1, 2], True), "mean_c": ("MEAN", [3], False),
    "sum_h": ("SUM", [1], True), "max_wc": ("REDUCE_MAX", [2, 3], False),
}


@given(seed=st.integers(0, 2**32 - 1))
def test_random_trees_fold_into_their_reader(seed: int) -> None:
    """Random chains and branches of elementwise ops over run-time, per-channel, batched and constant leaves,
    read by a 1x1 conv or a reduction: all folded into the reader, equal to LiteRT and to the unfused run."""
    rng = np.random.default_rng(seed)
    b, c = int(rng.integers(1, 3)), int(rng.choice([1, 3, 4, 5, 8, 13]))
    shape = (b, int(rng.integers(2, 6)), int(rng.integers(1, 6)), c)  # not 1x1: that conv becomes an FC
    mb = ModelBuilder()
    full = [mb.input("x", shape), mb.input("y", shape)]
    leaves = [*full, mb.input("gate", (int(rng.choice([1, b])), 1, 1, c)),
              mb.const("scalar", np.array(rng.uniform(-2, 2), np.float32)),
              mb.const("channel", weights(rng, c)), mb.const("dense", weights(rng, *shape))]
    value, n_ops = full[0], 0
    for _ in range(int(rng.integers(1, 5))):
        if rng.random() < 0.3:
            value = mb.op(str(rng.choice(PROLOGUE_UNARY)), [value], shape)
            n_ops += 1
            continue
        other = leaves[int(rng.integers(0, len(leaves)))]
        if rng.random() < 0.3:  # a branch: an op on a leaf, read only inside the tree
            other = mb.op(str(rng.choice(PROLOGUE_UNARY)), [full[int(rng.integers(0, 2))]], shape)
            n_ops += 1
        code = str(rng.choice(PROLOGUE_BINARY))
        opts = {"fused_activation_function": str(rng.choice(["NONE", "RELU", "RELU6"]))} \
            if code in ("ADD", "SUB", "MUL") else {}
        value = mb.op(code, [value, other] if rng.random() < 0.5 else [other, value], shape, opts)
        n_ops += 1
    reader = str(rng.choice(sorted(READERS)))
    if READERS[reader] is None:
        mb.output(conv(mb, value, shape, int(rng.integers(1, 10)), k=1, seed=seed % 1000)[0])
        code = "CONV_2D"
    else:
        code, axes, keep = READERS[reader]
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
        mb.output(mb.op(code, [value, _i32(mb, "axes", axes)], out_shape, {"keep_dims": keep}))
    model = mb.build()
    it = assert_matches_litert(model)
    assert len(_prologue(it.compiled.plan.graph, code).opt("prologue")) == n_ops
    assert not [spec for spec in kernels(it) if spec.shader == "elementwise"]
    feeds = random_inputs(model, 0)
    unfused, fused = run_gpuengine(model, feeds, optimize=False)[0], run_gpuengine(model, feeds)[0]
    for t, v in unfused.items():
        np.testing.assert_allclose(fused[t], v, rtol=1e-5, atol=1e-5)


def test_tree_left_to_epilogue_fusion_when_a_producer_can_host_it() -> None:
    """ADD(conv_out, x) where only the ADD reads conv_out: the conv's epilogue takes it at no cost."""
    mb = ModelBuilder()
    shape = (1, 5, 5, 8)
    x = mb.input("x", shape)
    a, _ = conv(mb, x, shape, 8, k=3, seed=1)
    s = mb.op("ADD", [a, x], shape)
    mb.output(conv(mb, s, shape, 4, k=1, seed=2)[0])
    mb.output(mb.op("RELU", [x], shape))
    model = mb.build()
    assert "ADD" in codes(apply(fuse_input_expression, model))
    it = assert_matches_litert(model)
    assert any(spec.label.endswith("+ADD") for spec in kernels(it))


def test_leaf_broadcast_over_space_is_not_absorbed() -> None:
    """A [1, H, W, 1] operand is neither full-shape nor per-channel: the prologue cannot read it."""
    mb = ModelBuilder()
    shape = (1, 4, 4, 8)
    x = mb.input("x", shape)
    m = mb.input("m", (1, 4, 4, 1))
    s = mb.op("MUL", [x, m], shape)
    mb.output(conv(mb, s, shape, 4, k=1, seed=2)[0])
    mb.output(mb.op("RELU", [x], shape))
    model = mb.build()
    assert "MUL" in codes(apply(fuse_input_expression, model))
    assert_matches_litert(model)


def test_malformed_prologue_is_refused_by_the_kernel() -> None:
    from gpuengine.lowering.kernels import registry
    from gpuengine.model.ops import ExpressionStep as Step
    from gpuengine.passes.graph_utils import with_fields

    graph = apply(fuse_input_expression, _se_block(8, 4))
    conv_op = _prologue(graph, "CONV_2D")
    assert registry.check(conv_op, graph) is None
    (step,) = conv_op.opt("prologue")
    cases = {
        "later step": (Step(step.op, (0, -1)),),
        "not a leaf input": (Step(step.op, (0, 1)),),
        "does not read input 0": (Step(step.op, (3, 3)),),
        "Steps": ("MUL",),
    }
    for words, steps in cases.items():
        reason = registry.check(with_fields(conv_op, prologue=steps), graph)
        assert reason is not None and words in reason, (words, reason)
    x, w, b, gate = conv_op.inputs
    padded = with_fields(conv_op, [x, w, b, gate], prologue=conv_op.opt("prologue"), padding=0,
                         stride_h=2, stride_w=2)
    assert "1x1" in (registry.check(padded, graph) or "")
