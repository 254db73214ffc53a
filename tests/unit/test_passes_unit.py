"""Graph passes one at a time, IR -> IR, on tiny graphs built with the model builder: the ops and tensors each
pass must leave, the values it must keep (the float64 reference runs the graph before and after), and its input
graph untouched. No GPU adapter, no LiteRT, no shader compiled."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.densify import densify
from gpuengine.model.ir import Graph, Sparsity, Tensor
from gpuengine.model.quantization import pack_int4, unpack_int4
from gpuengine.passes.conv_to_fully_connected import conv_to_fully_connected
from gpuengine.passes.dilated_conv import dilated_conv
from gpuengine.passes.drop_leading_units import drop_leading_units
from gpuengine.passes.fold_constants import fold_constants
from gpuengine.passes.fold_scale_into_conv import fold_scale_into_conv
from gpuengine.passes.fuse_elementwise_tree import fuse_elementwise_tree
from gpuengine.passes.fuse_normalization import fuse_normalization
from gpuengine.passes.merge_channel_pad import merge_channel_pad
from gpuengine.passes.merge_padding import merge_padding
from gpuengine.passes.pool_to_mean import pool_to_mean
from gpuengine.passes.remove_noops import remove_noops
from gpuengine.reference import run_reference

RNG = np.random.default_rng(29)
VALID, SAME = 1, 0  # TFLite's Padding enum


def snapshot(g: Graph) -> Any:
    """Everything a pass could change in its input by accident."""
    ops = [(o.code, tuple(o.inputs), tuple(o.outputs), repr(o.options)) for o in g.ops]
    tensors = [(t.name, t.shape, str(t.dtype), None if t.data is None else np.asarray(t.data).tobytes())
               for t in g.tensors]
    return ops, tensors, tuple(g.inputs), tuple(g.outputs)


def rewrite(graph_pass: Any, g: Graph) -> Graph:
    """The pass's result, checking that it left its input as it was."""
    before = snapshot(g)
    out = graph_pass(g)
    assert snapshot(g) == before, f"{graph_pass.__name__} changed its input graph"
    return out


def codes(g: Graph) -> list[str]:
    return [o.code for o in g.ops]


def assert_same_values(before: Graph, after: Graph, rtol: float = 1e-9) -> None:
    """Both graphs compute the same outputs (float64 reference) on random inputs (rtol: a pass that folds
    constants into float32 weights rounds them once)."""
    feeds = [RNG.standard_normal(before.tensors[i].shape).astype(np.float32) for i in before.inputs]
    want, got = run_reference(before, feeds), run_reference(after, feeds)
    assert list(before.outputs) == list(after.outputs)
    for t in before.outputs:
        np.testing.assert_allclose(got[t], want[t], rtol=rtol, atol=rtol)


def conv(mb: ModelBuilder, x: int, out_shape: tuple[int, ...], kernel: tuple[int, int], padding: int) -> int:
    cin, cout = mb.tensors[x].shape[-1], out_shape[-1]
    w = mb.const(f"w{len(mb.ops)}", RNG.standard_normal((cout, *kernel, cin)).astype(np.float32))
    b = mb.const(f"b{len(mb.ops)}", RNG.standard_normal(cout).astype(np.float32))
    return mb.op("CONV_2D", [x, w, b], out_shape, {"padding": padding, "stride_w": 1, "stride_h": 1})


# -- remove_noops ---------------------------------------------------------------------------------------------
def test_remove_noops_drops_a_same_shape_reshape_and_keeps_a_real_one():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    same = mb.op("RESHAPE", [x, mb.const("s", np.array([1, 4, 4, 3], np.int32))], (1, 4, 4, 3))
    relu = mb.op("RELU", [same], (1, 4, 4, 3))
    flat = mb.op("RESHAPE", [relu, mb.const("f", np.array([1, 48], np.int32))], (1, 48))
    mb.output(flat)
    g = mb.graph()
    out = rewrite(remove_noops, g)
    assert codes(out) == ["RELU", "RESHAPE"]
    assert out.ops[0].inputs == [x]  # the RELU reads the graph input directly now
    assert_same_values(g, out)


def test_remove_noops_keeps_an_activated_single_input_add():
    mb = ModelBuilder()
    x = mb.input("x", (1, 8))
    y = mb.op("ADD", [x], (1, 8), {"fused_activation_function": 1})  # RELU: not a copy
    mb.output(y)
    assert codes(rewrite(remove_noops, mb.graph())) == ["ADD"]


def test_remove_noops_drops_identity_transposes_and_zero_pads_but_not_a_real_permutation():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    same = mb.op("TRANSPOSE", [x, mb.const("id", np.arange(4, dtype=np.int32))], (1, 4, 4, 3))
    padded = mb.op("PAD", [same, mb.const("zero", np.zeros((4, 2), np.int32))], (1, 4, 4, 3))
    y = mb.op("TRANSPOSE", [padded, mb.const("swap", np.array([0, 2, 1, 3], np.int32))], (1, 4, 4, 3))
    mb.output(y)
    g = mb.graph()
    out = rewrite(remove_noops, g)
    assert codes(out) == ["TRANSPOSE"] and out.ops[0].inputs[0] == x and out.ops[0].outputs == [y]
    assert_same_values(g, out)


# -- fold_constants -------------------------------------------------------------------------------------------
def test_fold_constants_evaluates_constant_subgraphs_into_data():
    mb = ModelBuilder()
    x = mb.input("x", (1, 2))
    total = mb.op("ADD", [mb.const("a", np.array([1, 2], np.float32)), mb.const("b", np.array([10, 20], np.float32))],
                  (2,))
    y = mb.op("MUL", [x, total], (1, 2))
    mb.output(y)
    g = mb.graph()
    out = rewrite(fold_constants, g)
    assert codes(out) == ["MUL"]
    assert out.tensors[total].data is not None and out.tensors[total].data.tolist() == [11.0, 22.0]
    assert_same_values(g, out)


def test_fold_constants_folds_a_shape_chain_of_a_static_tensor():
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 4))
    shape = mb.op("SHAPE", [x], (3,), {"out_type": 2}, dtype=np.int32)
    begin, end, stride = (mb.const(name, np.array([v], np.int32)) for name, v in (("b", 2), ("e", 3), ("s", 1)))
    last = mb.op("STRIDED_SLICE", [shape, begin, end, stride], (1,), {"shrink_axis_mask": 0}, dtype=np.int32)
    y = mb.op("RESHAPE", [x, mb.op("CONCATENATION", [mb.const("m", np.array([-1], np.int32)), last], (2,),
                                    {"axis": 0}, dtype=np.int32)], (6, 4))
    mb.output(y)
    out = rewrite(fold_constants, mb.graph())
    assert codes(out) == ["RESHAPE"]
    assert out.tensors[out.ops[0].inputs[1]].data.tolist() == [-1, 4]


def test_int4_packing_round_trips_two_values_a_byte_low_nibble_first():
    values = np.array([[-8, 7, 0, -1], [3, -4, 5, 1]], np.int8)
    packed = pack_int4(values)
    assert packed.size == 4 and packed[0] == np.uint8((7 << 4) | 0x8)  # -8 in the low nibble, 7 in the high one
    t = Tensor(index=0, name="w", shape=values.shape, dtype=np.dtype(np.int8), data=packed.view(np.int8),
               type_code=17)
    np.testing.assert_array_equal(unpack_int4(t), values)


# -- conv_to_fully_connected -----------------------------------------------------------------------------------
def test_a_one_by_one_conv_on_a_one_by_one_map_becomes_fully_connected():
    mb = ModelBuilder()
    x = mb.input("x", (1, 1, 1, 8))
    y = conv(mb, x, (1, 1, 1, 4), (1, 1), VALID)
    mb.output(y)
    g = mb.graph()
    out = rewrite(conv_to_fully_connected, g)
    assert codes(out) == ["FULLY_CONNECTED"]
    fc = out.ops[0]
    np.testing.assert_array_equal(out.tensors[fc.inputs[1]].data, g.tensors[g.ops[0].inputs[1]].data.reshape(4, 8))
    assert fc.opt("keep_num_dims") is True and fc.outputs == [y]
    assert_same_values(g, out)


def test_a_conv_over_a_larger_map_stays_a_conv():
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 3, 8))
    mb.output(conv(mb, x, (1, 3, 3, 4), (1, 1), VALID))
    assert codes(rewrite(conv_to_fully_connected, mb.graph())) == ["CONV_2D"]


# -- merge_padding ----------------------------------------------------------------------------------------------
def _padded_conv(padding: int) -> tuple[Graph, int]:
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 3))
    pads = mb.const("p", np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32))
    padded = mb.op("PAD", [x, pads], (1, 11, 11, 3))
    out_size = 9 if padding == VALID else 11
    mb.output(conv(mb, padded, (1, out_size, out_size, 4), (3, 3), padding))
    return mb.graph(), x


def test_merge_padding_moves_a_zero_pad_into_a_valid_conv():
    g, x = _padded_conv(VALID)
    out = rewrite(merge_padding, g)
    assert codes(out) == ["CONV_2D"]
    assert out.ops[0].inputs[0] == x and out.ops[0].opt("explicit_padding") == (1, 2, 2, 1)  # top, bottom, left, right
    assert out.ops[0].inputs[1:] == g.ops[1].inputs[1:] and out.ops[0].outputs == g.ops[1].outputs
    # (explicit padding is the engine's own conv field: the float64 reference, TFLite's semantics, has none)


def test_merge_padding_leaves_a_same_conv_alone():
    g, _ = _padded_conv(SAME)
    assert codes(rewrite(merge_padding, g)) == ["PAD", "CONV_2D"]


# -- fold_scale_into_conv --------------------------------------------------------------------------------------
def test_a_per_channel_scale_after_a_conv_folds_into_its_weights_and_bias():
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 6, 3))
    features = conv(mb, x, (1, 6, 6, 4), (3, 3), SAME)
    y = mb.op("MUL", [features, mb.const("scale", np.array([1, 2, 3, 4], np.float32))], (1, 6, 6, 4))
    mb.output(y)
    g = mb.graph()
    out = rewrite(fold_scale_into_conv, g)
    assert codes(out) == ["CONV_2D"] and out.ops[0].inputs[0] == x and out.ops[0].outputs == [y]
    scale = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(out.tensors[out.ops[0].inputs[1]].data,
                                  g.tensors[g.ops[0].inputs[1]].data * scale[:, None, None, None])
    np.testing.assert_array_equal(out.tensors[out.ops[0].inputs[2]].data, g.tensors[g.ops[0].inputs[2]].data * scale)
    assert_same_values(g, out, rtol=1e-5)


def test_a_scale_of_a_tensor_read_elsewhere_is_not_folded():
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 6, 3))
    features = conv(mb, x, (1, 6, 6, 4), (3, 3), SAME)
    y = mb.op("MUL", [features, mb.const("scale", np.array([1, 2, 3, 4], np.float32))], (1, 6, 6, 4))
    mb.output(y, features)
    assert codes(rewrite(fold_scale_into_conv, mb.graph())) == ["CONV_2D", "MUL"]


# -- dilated_conv ------------------------------------------------------------------------------------------------
def test_space_to_batch_conv_batch_to_space_becomes_one_dilated_conv():
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 3))
    block = np.array([2, 2], np.int32)
    phases = mb.op("SPACE_TO_BATCH_ND", [x, mb.const("block", block), mb.const("pads", np.full((2, 2), 2, np.int32))],
                   (4, 6, 6, 3))
    features = conv(mb, phases, (4, 4, 4, 4), (3, 3), VALID)
    y = mb.op("BATCH_TO_SPACE_ND", [features, mb.const("block2", block), mb.const("crops", np.zeros((2, 2), np.int32))],
              (1, 8, 8, 4))
    mb.output(y)
    g = mb.graph()
    out = rewrite(dilated_conv, g)
    assert codes(out) == ["CONV_2D"] and out.ops[0].inputs[0] == x and out.ops[0].outputs == [y]
    assert (out.ops[0].opt("dilation_h_factor"), out.ops[0].opt("dilation_w_factor")) == (2, 2)
    assert_same_values(g, out)


# -- fuse_normalization ------------------------------------------------------------------------------------------
def test_rms_norm_written_as_six_ops_becomes_one():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 16))
    mean_square = mb.op("MEAN", [mb.op("MUL", [x, x], (1, 4, 16)), mb.const("axis", np.array([-1], np.int32))],
                        (1, 4, 1), {"keep_dims": True})
    norm = mb.op("RSQRT", [mb.op("ADD", [mean_square, mb.const("eps", np.array(1e-6, np.float32))], (1, 4, 1))],
                 (1, 4, 1))
    gamma = RNG.standard_normal(16).astype(np.float32)
    y = mb.op("MUL", [mb.op("MUL", [x, norm], (1, 4, 16)), mb.const("gamma", gamma)], (1, 4, 16))
    mb.output(y)
    out = rewrite(fuse_normalization, mb.graph())
    assert codes(out) == ["RMS_NORM"] and out.ops[0].inputs[0] == x and out.ops[0].outputs == [y]
    assert out.ops[0].opt("epsilon") == pytest.approx(1e-6)
    scale, offset = (out.tensors[t].data for t in out.ops[0].inputs[1:])
    np.testing.assert_array_equal(scale, gamma)
    assert not offset.any()


def test_a_mean_over_another_axis_is_no_norm():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 16))
    mean_square = mb.op("MEAN", [mb.op("MUL", [x, x], (1, 4, 16)), mb.const("axis", np.array([1], np.int32))],
                        (1, 1, 16), {"keep_dims": True})
    y = mb.op("MUL", [x, mb.op("RSQRT", [mean_square], (1, 1, 16))], (1, 4, 16))
    mb.output(y)
    assert "RMS_NORM" not in codes(rewrite(fuse_normalization, mb.graph()))


# -- merge_channel_pad ------------------------------------------------------------------------------------------
def _residual_with_channel_pad(extra: tuple[int, int]) -> tuple[Graph, int]:
    """ADD(a, PAD(x)) as BlazeFace grows its channels: x (8 channels) zero-extended to a's 16."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 8))
    a = mb.input("a", (1, 4, 4, 16))
    pads = mb.const("p", np.array([[0, 0], [0, 0], [0, 0], list(extra)], np.int32))
    padded = mb.op("PAD", [x, pads], (1, 4, 4, 8 + sum(extra)))
    mb.output(mb.op("ADD", [a, padded], (1, 4, 4, 16)))
    return mb.graph(), x


def test_a_pad_that_only_appends_zero_channels_is_read_zero_extended_by_the_add():
    g, x = _residual_with_channel_pad((0, 8))
    out = rewrite(merge_channel_pad, g)
    assert codes(out) == ["ADD"] and out.ops[0].inputs[1] == x and out.ops[0].opt("zero_extend") is True


def test_a_pad_before_the_channels_is_kept():
    g, _ = _residual_with_channel_pad((8, 0))  # x's channels moved up: not a zero extension
    assert codes(rewrite(merge_channel_pad, g)) == ["PAD", "ADD"]


# -- pool_to_mean -----------------------------------------------------------------------------------------------
def _average_pool(size: int) -> Graph:
    mb = ModelBuilder()
    x = mb.input("x", (1, size, size, 16))
    mb.output(mb.op("AVERAGE_POOL_2D", [x], (1, 1, 1, 16), {"padding": VALID, "stride_w": 1, "stride_h": 1,
                                                             "filter_width": size, "filter_height": size}))
    return mb.graph()


def test_a_global_average_pool_becomes_a_mean_over_height_and_width():
    g = _average_pool(8)
    out = rewrite(pool_to_mean, g)
    assert codes(out) == ["MEAN"]
    assert out.tensors[out.ops[0].inputs[1]].data.tolist() == [1, 2] and out.ops[0].opt("keep_dims") is True
    assert_same_values(g, out)


def test_a_small_average_pool_stays_a_pool():
    assert codes(rewrite(pool_to_mean, _average_pool(4))) == ["AVERAGE_POOL_2D"]  # 16 pixels: one loop is cheap


# -- drop_leading_units -----------------------------------------------------------------------------------------
def test_rank5_views_with_a_leading_unit_become_rank4():
    """The grouped-query attention pattern: RESHAPE to rank 5, BROADCAST_TO, RESHAPE back."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 10, 4))
    expanded = mb.op("RESHAPE", [x, mb.const("s1", np.array([1, 4, 1, 10, 4], np.int32))], (1, 4, 1, 10, 4))
    repeated = mb.op("BROADCAST_TO", [expanded, mb.const("s2", np.array([1, 4, 2, 10, 4], np.int32))],
                     (1, 4, 2, 10, 4))
    y = mb.op("RESHAPE", [repeated, mb.const("s3", np.array([1, 8, 10, 4], np.int32))], (1, 8, 10, 4))
    mb.output(y)
    g = mb.graph()
    out = rewrite(drop_leading_units, g)
    assert codes(out) == ["RESHAPE", "BROADCAST_TO", "RESHAPE"]
    assert out.tensors[expanded].shape == (4, 1, 10, 4) and out.tensors[repeated].shape == (4, 2, 10, 4)
    assert [out.tensors[o.inputs[1]].data.tolist() for o in out.ops[:2]] == [[4, 1, 10, 4], [4, 2, 10, 4]]
    assert out.tensors[y].shape == (1, 8, 10, 4)  # a graph output keeps its shape
    assert_same_values(g, out)


# -- fuse_elementwise_tree --------------------------------------------------------------------------------------
def test_a_chain_of_elementwise_ops_becomes_one_tree_op():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 8))
    square = mb.op("MUL", [x, x], (1, 4, 4, 8))
    total = mb.op("ADD", [square, x], (1, 4, 4, 8))
    y = mb.op("TANH", [total], (1, 4, 4, 8))
    mb.output(y)
    out = rewrite(fuse_elementwise_tree, mb.graph())
    assert len(out.ops) == 1 and out.ops[0].inputs == [x] and out.ops[0].outputs == [y]
    steps = out.ops[0].opt("tree")
    assert [s.op.code for s in steps] == ["MUL", "ADD", "TANH"]


def test_an_intermediate_read_twice_outside_the_tree_is_not_fused_away():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 8))
    square = mb.op("MUL", [x, x], (1, 4, 4, 8))
    y = mb.op("TANH", [square], (1, 4, 4, 8))
    mb.output(y, square)  # the square is a graph output too: it must still be written
    out = rewrite(fuse_elementwise_tree, mb.graph())
    assert square in [t for o in out.ops for t in o.outputs]


# -- densify ----------------------------------------------------------------------------------------------------
def test_densify_expands_a_csr_matrix():
    dense = np.array([[0, 5, 0, 0], [0, 0, 0, 0], [7, 0, 0, 9]], np.float32)
    rows = [{"format": 0, "dense_size": 3},
            {"format": 1, "array_segments": np.array([0, 1, 1, 3]), "array_indices": np.array([1, 0, 3])}]
    t = Tensor(index=0, name="w", shape=dense.shape, dtype=np.dtype(np.float32),
               data=np.array([5, 7, 9], np.float32), sparsity=Sparsity([0, 1], [], rows))
    np.testing.assert_array_equal(densify(t, dense.shape), dense)


def test_densify_rejects_segments_past_the_indices():
    rows = [{"format": 0, "dense_size": 2},
            {"format": 1, "array_segments": np.array([0, 1, 4]), "array_indices": np.array([1, 0])}]
    t = Tensor(index=0, name="w", shape=(2, 3), dtype=np.dtype(np.float32), data=np.ones(4, np.float32),
               sparsity=Sparsity([0, 1], [], rows))
    with pytest.raises(Exception, match="out of range"):
        densify(t, (2, 3))
