"""AVERAGE_POOL_2D / MAX_POOL_2D against LiteRT: filter sizes, strides, SAME/VALID, fused activations."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.model.reader import read_model

ACTIVATIONS = ["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT"]


def out_size(size: int, filt: int, stride: int, padding: str) -> int:
    return -(-size // stride) if padding == "SAME" else (size - filt + stride) // stride


def pool_model(code: str, shape: tuple[int, int, int, int], filt: tuple[int, int], stride: tuple[int, int],
               padding: str, act: str = "NONE", dtype=np.float32, quant: Quantization | None = None) -> bytes:
    b, h, w, c = shape
    out = (b, out_size(h, filt[0], stride[0], padding), out_size(w, filt[1], stride[1], padding), c)
    mb = ModelBuilder()
    x = mb.tensor("x", shape, dtype, quantization=quant)
    mb.inputs.append(x)
    opts = {"padding": padding, "filter_height": filt[0], "filter_width": filt[1], "stride_h": stride[0],
            "stride_w": stride[1], "fused_activation_function": act}
    y = mb.op(code, [x], out, opts, dtype=dtype)
    if quant is not None:
        mb.tensors[y].quantization = quant
    mb.output(y)
    return mb.build()


@st.composite
def pool_case(draw):
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    fh, fw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    h, w = draw(st.integers(fh, 13)), draw(st.integers(fw, 13))
    shape = (draw(st.integers(1, 2)), h, w, draw(st.sampled_from([1, 3, 4, 5, 7, 8, 13])))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return (draw(st.sampled_from(["AVERAGE_POOL_2D", "MAX_POOL_2D"])), shape, (fh, fw), stride, padding,
            draw(st.sampled_from(ACTIVATIONS)))


@given(pool_case())
def test_pool_random(case):
    code, shape, filt, stride, padding, act = case
    # Inputs in [-4, 4] so RELU6 / RELU_N1_TO_1 clamps are exercised.
    model = pool_model(code, shape, filt, stride, padding, act)
    feeds = {0: np.random.default_rng(1).uniform(-4, 4, shape).astype(np.float32)}
    assert_matches_litert(model, feeds)


@pytest.mark.parametrize("code", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_pool_padding_edges(code, padding):
    """Even filters with SAME padding put the extra padding at the bottom/right; corners see few pixels."""
    assert_matches_litert(pool_model(code, (1, 7, 6, 5), (4, 3), (2, 2), padding))
    assert_matches_litert(pool_model(code, (1, 5, 5, 3), (5, 5), (1, 1), padding))


@pytest.mark.parametrize("code", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_global_pool_uses_parallel_reduction(code):
    """A whole-map window is a reduction, which a discrete GPU splits over a workgroup per output."""
    model = pool_model(code, (1, 32, 24, 7), (32, 24), (1, 1), "VALID", "RELU6")
    it = assert_matches_litert(model, target="discrete")
    assert [s.decomposition.split for s in it.compiled.programs[0].info.specs if s.shader == "reduce"] == [256]


def test_quantized_pool_runs_on_gpu_and_plain_int8_falls_back():
    """int8 with a scale and zero point is a quantized tensor the GPU emulates (tests/ops/test_quantized.py);
    int8 without them is integer data, which stays on the CPU."""
    q = Quantization(scale=np.array([0.5], np.float32), zero_point=np.array([0], np.int64))
    model = pool_model("MAX_POOL_2D", (1, 4, 4, 3), (2, 2), (2, 2), "VALID", dtype=np.int8, quant=q)
    graph = read_model(model).main
    assert registry.check(graph.ops[0], graph) is None
    feeds = {0: np.random.default_rng(0).integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)}
    assert_matches_litert(model, feeds)
    model = pool_model("MAX_POOL_2D", (1, 4, 4, 3), (2, 2), (2, 2), "VALID", dtype=np.int8)
    graph = read_model(model).main
    reason = registry.check(graph.ops[0], graph)
    assert reason and "without one scale and zero point" in reason
    assert_matches_litert(model, feeds, all_gpu=False)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_pool_activations(act):
    """TFLite applies pooling activations as clamp ranges: TANH and SIGN_BIT leave values unchanged."""
    shape = (1, 6, 5, 6)
    feeds = {0: np.random.default_rng(2).uniform(-4, 4, shape).astype(np.float32)}
    for code in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        assert_matches_litert(pool_model(code, shape, (2, 2), (2, 1), "SAME", act), feeds)
