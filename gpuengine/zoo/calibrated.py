"""CalibratedNet: zoo nets whose random weights keep activations in range the way batch norm does in a trained one.

EfficientNet and MobileNet v3 use swish / hard-swish, which act like x/2 near 0 and like x for large x, so no
fixed weight gain holds their scale over depth (it drifts exponentially). CalibratedNet runs one calibration
input through the layers in numpy as they are added and scales each conv to a chosen output RMS.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .mobilenet import Net, Shape, _same


def _conv_numpy(x: np.ndarray, w: np.ndarray, stride: int, depthwise: bool) -> np.ndarray:
    """SAME-padded conv of NHWC x with weights [out, k, k, in] (depthwise: [1, k, k, c]), no bias."""
    n, h, wd, c = x.shape
    k = w.shape[1]
    oh, ow = _same(h, stride), _same(wd, stride)
    ph, pw = max((oh - 1) * stride + k - h, 0), max((ow - 1) * stride + k - wd, 0)
    xp = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    out = np.zeros((n, oh, ow, c if depthwise else w.shape[0]), np.float32)
    for i in range(k):
        for j in range(k):
            tap = xp[:, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride, :]
            out += tap * w[0, i, j] if depthwise else tap @ w[:, i, j, :].T
    return out


_NUMPY_UNARY = {
    "LOGISTIC": lambda a: 1.0 / (1.0 + np.exp(-a)), "RELU": lambda a: np.maximum(a, 0.0),
    "RELU6": lambda a: np.clip(a, 0.0, 6.0), "HARD_SWISH": lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0,
}
_NUMPY_BINARY = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide}
_CALIBRATION_SEED = 20240601  # the calibration input's own stream: the weights' draws do not depend on it


class CalibratedNet(Net):
    """A Net that runs one calibration input (uniform in [-1, 1]) through its layers in numpy as they are added,
    so that each conv can be scaled to a chosen output RMS on that input, as batch norm folded into a trained conv
    keeps activations in range (plus a small random bias, the folded shift). Deep swish / hard-swish nets need it:
    those act like x/2 near 0 and like x for large x, so no fixed gain keeps their scale, which drifts
    exponentially with depth. The scale is one per layer: per channel, it would fit the calibration input (a
    channel that happens to be small there would blow up on other inputs). Convs and classifiers go through
    `normalized`; the other ops the zoo uses (elementwise, MEAN, global pooling, RESHAPE, SOFTMAX) are evaluated
    by `op`."""

    def __init__(self, seed: int, description: str) -> None:
        super().__init__(seed, description)
        self.values: dict[int, np.ndarray] = {}
        self.calibration = np.random.default_rng(_CALIBRATION_SEED)
        self._next: np.ndarray | None = None  # the value of the op being added, when the caller computed it

    def input(self, name: str, shape: Shape) -> int:
        x = super().input(name, shape)
        self.values[x] = self.calibration.uniform(-1.0, 1.0, shape).astype(np.float32)
        return x

    def op(self, code: str, inputs: list[int], shape: Shape, options: dict[str, Any] | None = None,
           name: str | None = None) -> int:
        value = self._next if self._next is not None else self._evaluate(code, inputs, options or {}, shape)
        self._next = None
        out = super().op(code, inputs, shape, options, name)
        assert value.shape == tuple(shape), (code, value.shape, shape)
        self.values[out] = value.astype(np.float32)
        return out

    def _evaluate(self, code: str, inputs: list[int], options: dict[str, Any], shape: Shape) -> np.ndarray:
        args = [self.values[t] if t in self.values else np.asarray(self.mb.tensors[t].data) for t in inputs]
        if code in _NUMPY_UNARY:
            return _NUMPY_UNARY[code](args[0])
        if code in _NUMPY_BINARY:
            return _NUMPY_BINARY[code](args[0], args[1])
        if code == "MEAN":
            return args[0].mean(axis=tuple(int(a) for a in args[1]), keepdims=bool(options.get("keep_dims")))
        if code == "AVERAGE_POOL_2D" and args[0].shape[1:3] == (options["filter_height"], options["filter_width"]):
            return args[0].mean(axis=(1, 2), keepdims=True)
        if code == "RESHAPE":
            return args[0].reshape(shape)
        if code == "SOFTMAX":
            e = np.exp(args[0] - args[0].max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        raise NotImplementedError(f"CalibratedNet cannot evaluate {code}; add it or use `normalized`")

    def normalized(self, code: str, x: int, out_ch: int = 0, k: int = 1, stride: int = 1, name: str = "conv",
                   rms: float = 1.0, act: str = "NONE") -> int:
        """CONV_2D, DEPTHWISE_CONV_2D (SAME) or FULLY_CONNECTED whose weights give pre-activation outputs of RMS
        `rms` on the calibration input; `act`: its fused activation (NONE, RELU, RELU6)."""
        depthwise, fc = code == "DEPTHWISE_CONV_2D", code == "FULLY_CONNECTED"
        xv = self.values[x]
        c = xv.shape[-1]
        o = c if depthwise else out_ch
        wshape = (o, c) if fc else (1, k, k, c) if depthwise else (o, k, k, c)
        w = self.rng.standard_normal(wshape)  # only the direction matters: the scale is set below
        beta = self.rng.normal(0.0, self.bias_std, (o,))
        z = xv @ w.T if fc else _conv_numpy(xv, w.astype(np.float32), stride, depthwise)
        scale = rms / max(float(np.sqrt(np.mean(z * z))), 1e-6)
        w = w * scale
        self._next = (z * scale + beta).astype(np.float32)
        if act != "NONE":
            self._next = _NUMPY_UNARY[act](self._next)
        inputs = [x, self.mb.const(f"{name}/weights", w.astype(np.float32)),
                  self.mb.const(f"{name}/bias", beta.astype(np.float32))]
        if fc:
            return self.op(code, inputs, self._next.shape, {"fused_activation_function": act}, name)
        opts: dict[str, Any] = {"padding": "SAME", "stride_w": stride, "stride_h": stride,
                                "fused_activation_function": act}
        if depthwise:
            opts["depth_multiplier"] = 1
        return self.op(code, inputs, self._next.shape, opts, name)
