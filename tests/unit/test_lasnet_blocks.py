"""passes/lasnet_blocks.py finds the LASNet-style masked residual block (masker -> threshold -> nearest upsample ->
MUL into the residual branch) on ModelBuilder graphs, and refuses look-alikes sparse execution would get wrong;
latency/sparse.py's expectation of active patches and its choice of S or dense. No GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.latency import devices
from gpuengine.latency.sparse import choose_execution, expected_active, predict_block_ns
from gpuengine.lowering import codegen
from gpuengine.lowering.kernels import lasnet
from gpuengine.model.builder import ModelBuilder
from gpuengine.passes.lasnet_blocks import find_masked_blocks

RNG = np.random.default_rng(4)
H = W = 16
C = 8
SAME, VALID = 0, 1


def block(*, kernel: int = 3, align_corners: bool = False, extra_use: bool = False, swap: bool = False,
          relu: bool = True) -> ModelBuilder:
    mb = ModelBuilder()
    x = mb.input("x", (1, H, W, C))
    pooled = mb.op("AVERAGE_POOL_2D", [x], (1, H // 4, W // 4, C),
                   {"padding": VALID, "stride_w": 4, "stride_h": 4, "filter_width": 4, "filter_height": 4})
    logit = mb.op("CONV_2D", [pooled, mb.const("mw", np.full((1, 1, 1, C), 1.0 / C, np.float32)),
                              mb.const("mb", np.zeros(1, np.float32))], (1, H // 4, W // 4, 1),
                  {"padding": VALID, "stride_w": 1, "stride_h": 1})
    flag = mb.op("GREATER", [logit, mb.const("thr", np.array(0.0, np.float32))], (1, H // 4, W // 4, 1),
                 dtype=np.bool_)
    cast = mb.op("CAST", [flag], (1, H // 4, W // 4, 1))
    mask = mb.op("RESIZE_NEAREST_NEIGHBOR", [cast, mb.const("size", np.array([H, W], np.int32))], (1, H, W, 1),
                 {"align_corners": align_corners, "half_pixel_centers": not align_corners})
    w1 = mb.const("w1", RNG.standard_normal((C, kernel, kernel, C)).astype(np.float32))
    w2 = mb.const("w2", RNG.standard_normal((C, 3, 3, C)).astype(np.float32))
    b = mb.const("b", RNG.standard_normal(C).astype(np.float32))
    conv1 = mb.op("CONV_2D", [x, w1, b], (1, H, W, C),
                  {"padding": SAME, "stride_w": 1, "stride_h": 1, "fused_activation_function": 1 if relu else 0})
    conv2 = mb.op("CONV_2D", [conv1, w2, b], (1, H, W, C), {"padding": SAME, "stride_w": 1, "stride_h": 1})
    masked = mb.op("MUL", [mask, conv2] if swap else [conv2, mask], (1, H, W, C))
    mb.output(mb.op("ADD", [masked, x] if swap else [x, masked], (1, H, W, C)))
    if extra_use:
        mb.output(conv1)
    return mb


@pytest.mark.parametrize("swap", [False, True])
def test_the_masked_block_is_found_with_its_parameters(swap):
    graph = block(swap=swap).graph()
    (found,) = find_masked_blocks(graph)
    assert found.x == graph.inputs[0] and found.out == graph.outputs[0]
    assert sorted(found.ops) == list(range(len(graph.ops)))  # masker, both convs, MUL and ADD
    assert found.cell == 4 and found.shape == (H, W, C) and found.conv1_relu
    assert found.threshold == 0.0 and found.masker_bias == 0.0
    np.testing.assert_allclose(found.masker_weights, np.full(C, 1.0 / C))
    assert found.conv1[0].shape == (C, 3, 3, C) and found.conv2[1].shape == (C,)


@pytest.mark.parametrize("change", [{"kernel": 5}, {"align_corners": True}, {"extra_use": True}])
def test_look_alikes_are_refused(change):
    """A 5x5 conv (the halo would be 2), align_corners (the upsample is no longer cell-aligned), or a branch tensor
    used outside the block (it must be computed everywhere) leave the block dense."""
    assert find_masked_blocks(block(**change).graph()) == []


def test_expected_active_patches():
    # patch = cell: each patch is active with the rate; a 2x2-cell patch unless all four cells are off
    assert expected_active(32, 32, 4, 4, 0.25) == pytest.approx(64 * 0.25)
    assert expected_active(32, 32, 4, 8, 0.25) == pytest.approx(16 * (1 - 0.75 ** 4))
    assert expected_active(32, 32, 4, 2, 0.0) == 0.0 and expected_active(32, 32, 4, 2, 1.0) == 256


def test_the_choice_is_the_fastest_predicted_option_and_dense_wins_a_tie():
    device = devices.for_target("cpu")
    low = predict_block_ns(device, 32, 32, 16, 4, 4, 0.1)
    assert low < predict_block_ns(device, 32, 32, 16, 4, 4, 0.9)  # fewer active patches, less predicted time
    mode, size, options = choose_execution(device, 32, 32, 16, 4, 0.1, dense_ns=1e12)
    assert mode == "sparse" and options[f"sparse {size}"] == min(options.values())
    cheapest = min(v for k, v in options.items() if k != "dense")
    assert choose_execution(device, 32, 32, 16, 4, 0.1, dense_ns=cheapest)[:2] == ("dense", 0)


def test_kernel_sources_bake_only_numbers():
    (found,) = find_masked_blocks(block().graph())
    sources = lasnet.sources(found, 4)
    assert set(sources) == {"mask", "args", "block"}
    assert all("${" not in text for text in sources.values())
    assert "const THRESHOLD: f32 = 0.0;" in sources["mask"] and "const KEEP: u32 = 0u;" in sources["mask"]
    assert lasnet.supports(found, 4) is None
    assert lasnet.geometry(found, 4) == {"npx": 4, "npy": 4, "np": 16, "ncx": 4, "cells": 16}


def test_the_program_specs_share_their_scratch_and_dispatch_the_convs_indirectly():
    """In a GPU program (PHWC4 tensors) the mask kernel counts the active patches, the args kernel turns the count
    into the indirect arguments the block kernel is dispatched by, and mask and block read x and write out; a patch
    whose workgroup memory exceeds WebGPU's guaranteed 16 KiB is refused."""
    (found,) = find_masked_blocks(block().graph())
    mask, args, conv = lasnet.specs(found, 4, key="k")
    assert not mask.indirect and not args.indirect and conv.indirect == "k.args"
    assert mask.dispatch == (1, 1, 1) and args.dispatch == (1, 1, 1)  # 16 patches: one workgroup of 64
    assert {b.scratch_key for b in mask.bindings if b.writable} >= {"k.count", "k.cells", "k.patches"}
    assert {b.scratch_key for b in args.bindings if b.writable} == {"k.count", "k.args"}
    assert not any(b.scratch_key == "k.args" for b in mask.bindings + conv.bindings)  # never bound where indirect
    for spec in (mask, conv):
        assert [b.tensor for b in spec.bindings if b.tensor is not None and not b.writable] == [found.x]
        assert [b.tensor for b in spec.bindings if b.writable and b.tensor is not None] == [found.out]
    assert lasnet.LAYOUTS["phwc4"] in codegen.render(mask)  # the program's tensors; the runner's own are BHWC
    assert lasnet.LAYOUTS["bhwc"] in lasnet.sources(found, 4)["mask"]
    thin = lasnet.specs(found, 4, pixels=1)[2]  # a pixel and output slice per invocation: 6 x 6 x 2 jobs, one round
    assert thin.params["T1"] == thin.params["T2"] == 1 and thin.workgroup == (72, 1, 1)
    assert lasnet.specs(found, 4)[2].params["T1"] == 6 and "${" not in lasnet.sources(found, 4, pixels=1)["block"]
    assert lasnet.supports(found, 8) is None  # C = 8: (144 + 100) pixels x 32 bytes
    assert "workgroup memory" in lasnet.supports(found, 16)


def test_mat4_weights_multiply_as_the_conv():
    """mat4_weights' block for (out slice, tap, in slice) times an input vec4 gives that tap's contribution to the 4
    output channels, as the OHWI weights define it."""
    weights = RNG.standard_normal((C, 3, 3, C)).astype(np.float32)
    blocks = lasnet.mat4_weights(weights).reshape(C // 4, 9, C // 4, 4, 4)  # [o4, tap, i4, column j, row o]
    v = RNG.standard_normal(4).astype(np.float32)
    o4, tap, i4 = 1, 5, 0
    got = blocks[o4, tap, i4].T @ v  # WGSL's mat4x4 is column-major: m * v = sum_j column_j * v[j]
    want = weights[o4 * 4:o4 * 4 + 4, tap // 3, tap % 3, i4 * 4:i4 * 4 + 4] @ v
    np.testing.assert_allclose(got, want, rtol=1e-6)
