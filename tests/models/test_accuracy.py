"""gpuengine's error against the exact (float64) result, beside LiteRT's, where float32 engines differ most.

Issue 11 part 4: an EfficientNet-B0-like net with uncalibrated random weights (pre-sigmoid values in the
thousands) put gpuengine 11% of the output range away from LiteRT, while LiteRT's reference kernels and XNNPACK
differed from each other by 3.7%. Measured against float64 (gpuengine/reference.py):

* the net is ill-conditioned: an engine whose every op is correctly rounded to f32 (run_reference(round_to=
  np.float32), the best any f32 engine can do) is itself 1e-4 to 0.24 of the output range away from the exact
  result, input by input; the SE gates turn the relative error of pre-sigmoid values in the thousands into an
  absolute error of the gate, and 16 blocks compound it. XNNPACK, LiteRT's reference kernels and gpuengine land
  anywhere in that spread, so which one is closest on a given input is chance (the 11% vs 3.7%).
* one kernel was less accurate than LiteRT's: exp on the adapter (WGSL allows 3 + 2|x| ULP; lavapipe computes
  exp2(x * log2 e)) made LOGISTIC 17 ULP off at x = -20 where XNNPACK is within 3.4; lowering/kernels/wgsl_math.py's
  exp4 (range reduction and a polynomial) is within 2.1 ULP for LOGISTIC and 1.2 for EXP (XNNPACK: 3.2, 60);
  TANH, ELU and SOFTMAX use it too, TANH and ELU through expm1_4 (2.5 and 1.1 ULP; XNNPACK 4.2, 3.3).
  It does not change the net's figures beyond the chance above: the median errors over inputs stay alike.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import random_inputs, relative_error, run_gpuengine

from gpuengine import Interpreter
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.reference import run_reference
from gpuengine.zoo import efficientnet
from gpuengine.zoo.calibrated import CalibratedNet

litert = pytest.importorskip("ai_edge_litert.interpreter")


def run_xnnpack(model: bytes, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """LiteRT's default CPU kernels (XNNPACK)."""
    it = litert.Interpreter(model_content=model)
    it.allocate_tensors()
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def ulps(got: np.ndarray, exact: np.ndarray) -> float:
    """Largest error in units of the f32 spacing at each exact value (results in f32's normal range)."""
    normal = (np.abs(exact) > 1.2e-38) & (np.abs(exact) < 3.4e38)
    spacing = np.spacing(np.abs(exact[normal]).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(got[normal].astype(np.float64) - exact[normal]) / spacing))


@pytest.mark.parametrize("code,low,high", [("LOGISTIC", -30.0, 30.0), ("EXP", -80.0, 80.0), ("TANH", -9.0, 9.0),
                                           ("ELU", -20.0, 5.0), ("SOFTMAX", -60.0, 0.0)])
def test_exp_based_ops_as_accurate_as_xnnpack(code, low, high):
    """Relative accuracy over the whole range, not only near 0: a gate sigmoid(-20) multiplies its channel, and
    TANH / ELU near 0 must not cancel (1 - exp(-2x), exp(x) - 1: they were 1,560 and 3,800 ULP off; SOFTMAX 82)."""
    x = np.linspace(low, high, 40000, dtype=np.float32).reshape(1, 100, 100, 4)
    options = None
    if code == "SOFTMAX":  # 400 classes per pixel, logits spread over 60
        x = np.random.default_rng(0).uniform(low, high, (1, 10, 10, 400)).astype(np.float32)
        options = {"beta": 1.0}
    mb = ModelBuilder()
    t = mb.input("x", x.shape)
    out = mb.op(code, [t], x.shape, options)
    mb.output(out)
    model = mb.build()
    exact = run_reference(model, {t: x})[out]
    gpu = run_gpuengine(model, {t: x}, precision="fp32")[0][out]
    # XNNPACK: LOGISTIC 3.2, EXP 60 (exp2 of a rounded x log2 e), TANH 4.2, ELU 3.3, SOFTMAX 33
    xnn = ulps(run_xnnpack(model, {t: x})[out], exact)
    assert ulps(gpu, exact) <= min(max(xnn, 1.0) * 1.25, 4.0 if code != "SOFTMAX" else 40.0), (ulps(gpu, exact), xnn)


class UncalibratedNet(CalibratedNet):
    """The zoo's EfficientNet-B0 layers with plain He-like random weights (std gain / sqrt(fan in)) instead of
    calibrated ones: with gain 1.85 the activations grow over depth to the thousands, as in the issue's net."""

    def __init__(self, seed: int, gain: float) -> None:
        super().__init__(seed, f"efficientnet_b0-like, uncalibrated (gain {gain}, seed {seed})")
        self.gain = gain

    def normalized(self, code: str, x: int, out_ch: int = 0, k: int = 1, stride: int = 1, name: str = "conv",
                   rms: float = 1.0, act: str = "NONE") -> int:
        depthwise, fc = code == "DEPTHWISE_CONV_2D", code == "FULLY_CONNECTED"
        c = self.shape(x)[-1]
        o = c if depthwise else out_ch
        shape = (o, c) if fc else (1, k, k, c) if depthwise else (o, k, k, c)
        fan_in = c if fc else k * k if depthwise else k * k * c
        weights = (self.rng.standard_normal(shape) * self.gain / math.sqrt(fan_in)).astype(np.float32)
        bias = self.rng.normal(0.0, self.bias_std, (o,)).astype(np.float32)
        inputs = [x, self.mb.const(f"{name}/weights", weights), self.mb.const(f"{name}/bias", bias)]
        if fc:
            return self.op(code, inputs, (self.shape(x)[0], o), {"fused_activation_function": act}, name)
        n, h, w = self.shape(x)[:3]
        oh, ow = -(-h // stride), -(-w // stride)
        opts = {"padding": "SAME", "stride_w": stride, "stride_h": stride, "fused_activation_function": act}
        if depthwise:
            opts["depth_multiplier"] = 1
        return self.op(code, inputs, (n, oh, ow, o), opts, name)

    def op(self, code, inputs, shape, options=None, name=None):  # no calibration values needed
        return super(CalibratedNet, self).op(code, inputs, shape, options, name)


def uncalibrated_efficientnet(seed: int = 0, resolution: int = 64, gain: float = 1.85) -> tuple[bytes, int]:
    """B0's 16 MBConv blocks with SE at a reduced resolution; outputs the logits (and the probabilities)."""
    net = UncalibratedNet(seed, gain)
    x = net.input("input", (1, resolution, resolution, 3))
    x = efficientnet.swish(net, net.normalized("CONV_2D", x, efficientnet.STEM_CHANNELS, 3, 2, "stem/conv"), "stem")
    block = 0
    for kernel, repeats, out_ch, expansion, stride in efficientnet.B0_STAGES:
        for i in range(repeats):
            x = efficientnet.mbconv(net, x, kernel, out_ch, expansion, stride if i == 0 else 1, f"block{block}")
            block += 1
    x = efficientnet.swish(net, net.normalized("CONV_2D", x, efficientnet.HEAD_CHANNELS, name="head/conv"), "head")
    logits = net.normalized("FULLY_CONNECTED", net.mean_hw(x, "head/pool", keep_dims=False), 1000,
                            name="head/classifier")
    return net.build(logits, net.softmax(logits, "probabilities")), logits


INPUTS = range(4)


@pytest.fixture(scope="module")
def ill_conditioned() -> dict:
    """Errors vs float64 of each engine on the uncalibrated net, input by input."""
    model, logits = uncalibrated_efficientnet()
    errors: dict[str, list[float]] = {"xnnpack": [], "correctly_rounded_f32": [], "gpu": [], "gpu_no_passes": []}
    engines = {"gpu": Interpreter(model_content=model, precision="fp32"),
               "gpu_no_passes": Interpreter(model_content=model, precision="fp32", optimize=False)}
    presigmoid = 0.0
    for seed in INPUTS:
        feeds = random_inputs(model, seed)
        exact_all = run_reference(model, feeds, all_tensors=seed == 0)
        exact = exact_all[logits]
        if seed == 0:
            graph = read_model(model).main
            presigmoid = max(float(np.abs(exact_all[op.inputs[0]]).max()) for op in graph.ops
                             if op.code == "LOGISTIC")
        errors["xnnpack"].append(relative_error(run_xnnpack(model, feeds)[logits], exact))
        errors["correctly_rounded_f32"].append(
            relative_error(run_reference(model, feeds, round_to=np.float32)[logits], exact))
        for name, it in engines.items():
            it.allocate_tensors()
            for t, v in feeds.items():
                it.set_tensor(t, v)
            it.invoke()
            errors[name].append(relative_error(it.get_tensor(logits), exact))
    return {"errors": errors, "presigmoid": presigmoid}


def test_uncalibrated_efficientnet_is_ill_conditioned(ill_conditioned):
    """The net shows the issue's effect: pre-sigmoid values in the thousands, and rounding each op's result to
    f32 once (no engine can do better) already costs far more than f32's 6e-8 on some inputs."""
    assert ill_conditioned["presigmoid"] > 1000
    assert max(ill_conditioned["errors"]["correctly_rounded_f32"]) > 1e-4


@pytest.mark.parametrize("engine", ["gpu", "gpu_no_passes"])
def test_gpuengine_as_close_to_float64_as_xnnpack(ill_conditioned, engine):
    """Input by input, where an engine lands in the spread is chance; over the inputs, gpuengine (passes on or off)
    is as close to the exact result as XNNPACK or a correctly rounded f32 engine: its median error is within 3x
    of theirs, however the errors fall."""
    errors = ill_conditioned["errors"]
    baseline = np.median([max(a, b) for a, b in zip(errors["xnnpack"], errors["correctly_rounded_f32"])])
    assert np.median(errors[engine]) <= 3 * baseline, errors
