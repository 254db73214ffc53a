"""Validation end to end (tests/unit/test_validate.py holds the rules): NaN/Inf inputs run like LiteRT on the GPU, and
empty tensors run on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import cached_reference_model, random_inputs, run_gpuengine, run_litert

from gpuengine import zoo
from gpuengine.model.builder import ModelBuilder


def _poisoned(model: bytes) -> dict[int, np.ndarray]:
    feeds = random_inputs(model, seed=3)
    for v in feeds.values():
        flat = v.reshape(-1)
        flat[::97] = np.nan
        flat[5::89] = np.inf
        flat[7::101] = -np.inf
    return feeds


def test_nan_and_inf_flow_through_where_no_clamp_is_involved() -> None:
    """conv, depthwise, add, mean, softmax: NaN exactly where LiteRT has NaN, the finite values equal."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 4))
    w = mb.const("w", rng.standard_normal((6, 3, 3, 4)).astype(np.float32))
    c = mb.op("CONV_2D", [x, w, mb.const("b", np.zeros(6, np.float32))], (1, 8, 8, 6), {"stride_h": 1, "stride_w": 1})
    d = mb.op("DEPTHWISE_CONV_2D", [c, mb.const("dw", rng.standard_normal((1, 3, 3, 6)).astype(np.float32)),
                                    mb.const("db", np.zeros(6, np.float32))], (1, 8, 8, 6),
              {"stride_h": 1, "stride_w": 1, "depth_multiplier": 1})
    s = mb.op("ADD", [d, c], (1, 8, 8, 6))
    m = mb.op("MEAN", [s, mb.const("axes", np.array([1], np.int32))], (1, 8, 6), {"keep_dims": False})
    mb.output(s, mb.op("SOFTMAX", [m], (1, 8, 6), {"beta": 1.0}))
    model = mb.build()
    feeds = {0: rng.standard_normal((1, 8, 8, 4)).astype(np.float32)}
    feeds[0][0, 1, 2, 3], feeds[0][0, 6, 6, 0], feeds[0][0, 3, 0, 1] = np.nan, np.inf, -np.inf
    ref = run_litert(model, feeds)
    got, _ = run_gpuengine(model, feeds)
    for t, r in ref.items():
        assert np.isnan(r).any()
        np.testing.assert_array_equal(np.isnan(got[t]), np.isnan(r))
        finite = np.isfinite(r)
        np.testing.assert_allclose(got[t][finite], r[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["tiny", "face_detection_short_range"])
def test_nan_and_inf_inputs_run_without_error(name: str) -> None:
    """No exception, no hang; outputs of the declared shapes, finite wherever LiteRT's are finite."""
    model = zoo.get(name) if name in zoo.MODELS else cached_reference_model(name)
    feeds = _poisoned(model)
    ref = run_litert(model, feeds)
    got, _ = run_gpuengine(model, feeds)
    for t, r in ref.items():
        assert got[t].shape == r.shape
        assert np.isnan(r).any()  # the inputs did reach the outputs on LiteRT
        finite = np.isfinite(r)
        np.testing.assert_allclose(got[t][finite], r[finite], rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["tiny", "face_detection_short_range"])
def test_nan_inputs_give_nan_where_litert_does(name: str) -> None:
    model = zoo.get(name) if name in zoo.MODELS else cached_reference_model(name)
    feeds = _poisoned(model)
    ref = run_litert(model, feeds)
    got, _ = run_gpuengine(model, feeds)
    for t, r in ref.items():
        np.testing.assert_array_equal(np.isnan(got[t]), np.isnan(r))


# -- what the GPU kernels must not see (delegate/support.py) ---------------------------------------------------------
def test_empty_tensors_run_on_the_cpu() -> None:
    """wgpu refuses zero-byte buffer writes ("Invalid data_length/offset" before): LiteRT runs empty tensors."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 0, 4, 2))
    mb.output(mb.op("RELU", [x], (1, 0, 4, 2)))
    got, it = run_gpuengine(mb.build(), {0: np.zeros((1, 0, 4, 2), np.float32)})
    assert next(iter(got.values())).shape == (1, 0, 4, 2)
    assert "empty tensor" in it.compiled.plan.unsupported["RELU"]
