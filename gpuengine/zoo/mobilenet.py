"""MobileNet v1 / v2 (1.0, 224): the op structure of the TFLite-hosted float models, seeded random weights.

Real weights need a download (and TensorFlow to convert); these models exercise the same kernels, shapes and
memory plan, so they serve for benchmarks and GPU-vs-LiteRT checks anywhere. `Net` is the layer helper the
other zoo modules share: it computes NHWC output shapes and draws He-scaled weights.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..model.builder import ModelBuilder, write_model

Shape = tuple[int, ...]

# Weight gain per activation: He (sqrt 2) for rectifiers keeps the second moment roughly constant. HARD_SWISH
# is ~x/2 near 0 and ~x for large x; 1.6 (found by sweeping the segmentation net) keeps block stds in 0.4..1.
_GAINS = {"NONE": 1.0, "RELU": math.sqrt(2.0), "RELU6": math.sqrt(2.0), "HARD_SWISH": 1.6}
# Activations a conv can fuse; others (HARD_SWISH) follow the conv as their own op, as in converted models.
_FUSABLE = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH")


def _same(size: int, stride: int) -> int:
    return -(-size // stride)


class Net:
    """A ModelBuilder with NHWC layer helpers: shapes are computed here, so no caller writes them by hand."""

    def __init__(self, seed: int, description: str, bias_std: float = 0.01) -> None:
        self.mb = ModelBuilder()
        self.rng = np.random.default_rng(seed)
        self.description = description
        self.bias_std = bias_std
        self.shapes: dict[int, Shape] = {}
        self.scalars: dict[float, int] = {}

    def shape(self, x: int) -> Shape:
        return self.shapes[x]

    def input(self, name: str, shape: Shape) -> int:
        x = self.mb.input(name, shape)
        self.shapes[x] = tuple(shape)
        return x

    def op(self, code: str, inputs: list[int], shape: Shape, options: dict[str, Any] | None = None,
           name: str | None = None) -> int:
        out = self.mb.op(code, inputs, tuple(shape), options, name=name)
        assert isinstance(out, int)
        self.shapes[out] = tuple(shape)
        return out

    def weights(self, name: str, shape: Shape, fan_in: int, gain: float) -> int:
        std = gain / math.sqrt(fan_in)
        return self.mb.const(name, self.rng.normal(0.0, std, shape).astype(np.float32))

    def bias(self, name: str, n: int) -> int:
        return self.mb.const(name, self.rng.normal(0.0, self.bias_std, (n,)).astype(np.float32))

    def build(self, *outputs: int) -> bytes:
        self.mb.output(*outputs)
        model = self.mb.to_model()
        model.description = self.description
        return write_model(model)

    def conv(self, x: int, out_ch: int, k: int = 1, stride: int = 1, act: str = "NONE", name: str = "conv",
             gain: float | None = None) -> int:
        """CONV_2D, SAME padding, activation fused or as a following op; weights [out, k, k, in]."""
        n, h, w, c = self.shape(x)
        gain = _GAINS.get(act, 1.0) if gain is None else gain
        wt = self.weights(f"{name}/weights", (out_ch, k, k, c), k * k * c, gain)
        b = self.bias(f"{name}/bias", out_ch)
        fused = act if act in _FUSABLE else "NONE"
        opts = {"padding": "SAME", "stride_w": stride, "stride_h": stride, "fused_activation_function": fused}
        y = self.op("CONV_2D", [x, wt, b], (n, _same(h, stride), _same(w, stride), out_ch), opts, name)
        return y if act == fused else self.unary(act, y, f"{name}/{act.lower()}")

    def dwconv(self, x: int, k: int = 3, stride: int = 1, act: str = "NONE", name: str = "dw",
               gain: float | None = None) -> int:
        """DEPTHWISE_CONV_2D (multiplier 1), SAME padding, activation as in `conv`; weights [1, k, k, c]."""
        n, h, w, c = self.shape(x)
        gain = _GAINS.get(act, 1.0) if gain is None else gain
        wt = self.weights(f"{name}/depthwise_weights", (1, k, k, c), k * k, gain)
        b = self.bias(f"{name}/bias", c)
        fused = act if act in _FUSABLE else "NONE"
        opts = {"padding": "SAME", "stride_w": stride, "stride_h": stride, "depth_multiplier": 1,
                "fused_activation_function": fused}
        y = self.op("DEPTHWISE_CONV_2D", [x, wt, b], (n, _same(h, stride), _same(w, stride), c), opts, name)
        return y if act == fused else self.unary(act, y, f"{name}/{act.lower()}")

    def global_avg_pool(self, x: int, name: str = "pool") -> int:
        """AVERAGE_POOL_2D with a whole-map VALID window (7x7 in MobileNet), -> [n, 1, 1, c]."""
        n, h, w, c = self.shape(x)
        opts = {"padding": "VALID", "stride_w": 1, "stride_h": 1, "filter_width": w, "filter_height": h,
                "fused_activation_function": "NONE"}
        return self.op("AVERAGE_POOL_2D", [x], (n, 1, 1, c), opts, name)

    def mean_hw(self, x: int, name: str = "mean", keep_dims: bool = True) -> int:
        """MEAN over H and W, -> [n, 1, 1, c] (keep_dims) or [n, c]."""
        n, _, _, c = self.shape(x)
        axes = self.mb.const(f"{name}/axes", np.array([1, 2], np.int32))
        return self.op("MEAN", [x, axes], (n, 1, 1, c) if keep_dims else (n, c), {"keep_dims": keep_dims}, name)

    def scalar(self, value: float) -> int:
        """A scalar float constant, one tensor per value however often it is used (as converters share them)."""
        key = float(np.float32(value))
        if key not in self.scalars:
            self.scalars[key] = self.mb.const(f"scalar/{key!r}", np.array(key, np.float32))
            self.shapes[self.scalars[key]] = ()
        return self.scalars[key]

    def binary(self, code: str, a: int, b: int, name: str | None = None) -> int:
        """ADD / MUL with numpy broadcasting of the shapes."""
        shape = tuple(int(d) for d in np.broadcast_shapes(self.shape(a), self.shape(b)))
        return self.op(code, [a, b], shape, {"fused_activation_function": "NONE"}, name)

    def unary(self, code: str, x: int, name: str | None = None) -> int:
        """RELU, RELU6, LOGISTIC, HARD_SWISH, ...: shape-preserving, no fused activation."""
        return self.op(code, [x], self.shape(x), None, name)

    def resize_bilinear(self, x: int, size: tuple[int, int], name: str = "resize") -> int:
        n, _, _, c = self.shape(x)
        size_t = self.mb.const(f"{name}/size", np.array(size, np.int32))
        opts = {"align_corners": False, "half_pixel_centers": True}
        return self.op("RESIZE_BILINEAR", [x, size_t], (n, size[0], size[1], c), opts, name)

    def reshape(self, x: int, shape: Shape, name: str = "reshape") -> int:
        assert math.prod(shape) == math.prod(self.shape(x)), (shape, self.shape(x))
        shape_t = self.mb.const(f"{name}/shape", np.array(shape, np.int32))
        return self.op("RESHAPE", [x, shape_t], shape, {"new_shape": list(shape)}, name)

    def softmax(self, x: int, name: str = "softmax") -> int:
        """SOFTMAX over the last axis."""
        return self.op("SOFTMAX", [x], self.shape(x), {"beta": 1.0}, name)



# (stride, output channels) of the 13 depthwise-separable blocks of MobileNet v1.
V1_BLOCKS: tuple[tuple[int, int], ...] = (
    (1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512),
    (1, 512), (1, 512), (1, 512), (1, 512), (1, 512), (2, 1024), (1, 1024),
)
# (expansion t, output channels c, repeats n, first stride s) of MobileNet v2's bottleneck groups.
V2_GROUPS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)
NUM_CLASSES = 1001
# Logit gain: pooled features are small, so scale the classifier up a bit for a non-flat softmax.
_LOGIT_GAIN = 4.0


def mobilenet_v1(seed: int = 0) -> bytes:
    """MobileNet v1 1.0 224: 31 ops (15 CONV_2D, 13 DEPTHWISE_CONV_2D, AVERAGE_POOL_2D, RESHAPE, SOFTMAX)."""
    net = Net(seed, f"gpuengine.zoo mobilenet_v1 (random weights, seed={seed})")
    x = net.input("input", (1, 224, 224, 3))
    x = net.conv(x, 32, 3, 2, "RELU6", name="MobilenetV1/Conv2d_0")
    for i, (stride, ch) in enumerate(V1_BLOCKS, start=1):
        x = net.dwconv(x, 3, stride, "RELU6", name=f"MobilenetV1/Conv2d_{i}_depthwise")
        x = net.conv(x, ch, 1, 1, "RELU6", name=f"MobilenetV1/Conv2d_{i}_pointwise")
    x = net.global_avg_pool(x, "MobilenetV1/Logits/AvgPool_1a")
    x = net.conv(x, NUM_CLASSES, 1, 1, "NONE", name="MobilenetV1/Logits/Conv2d_1c_1x1", gain=_LOGIT_GAIN)
    x = net.reshape(x, (1, NUM_CLASSES), "MobilenetV1/Logits/SpatialSqueeze")
    return net.build(net.softmax(x, "MobilenetV1/Predictions/Softmax"))


def inverted_residual(net: Net, x: int, expansion: int, out_ch: int, stride: int, name: str,
                      k: int = 3, act: str = "RELU6", se: bool = False) -> int:
    """1x1 expand (none when expansion is 1), kxk depthwise, optional SE, 1x1 linear projection, residual ADD.

    A residual block's projection is scaled down (gain 1/2) so the stream's variance grows slowly over chained
    ADDs instead of doubling at each, keeping RELU6 out of saturation without batch norm.
    """
    in_ch = net.shape(x)[3]
    residual = stride == 1 and in_ch == out_ch
    h = x
    if expansion != 1:
        h = net.conv(h, in_ch * expansion, 1, 1, act, name=f"{name}/expand")
    h = net.dwconv(h, k, stride, act, name=f"{name}/depthwise")
    if se:
        h = squeeze_excite(net, h, name=f"{name}/se")
    gain = (0.5 if residual else 1.0) * (2.0 if se else 1.0)  # the SE gate halves activations on average
    h = net.conv(h, out_ch, 1, 1, "NONE", name=f"{name}/project", gain=gain)
    return net.binary("ADD", x, h, name=f"{name}/add") if residual else h


def squeeze_excite(net: Net, x: int, name: str, reduction: int = 4, pool: str = "AVERAGE_POOL_2D") -> int:
    """Squeeze-excitation: global pool -> 1x1 conv RELU -> 1x1 conv -> LOGISTIC -> channel-wise MUL."""
    c = net.shape(x)[3]
    if pool == "AVERAGE_POOL_2D":
        s = net.global_avg_pool(x, f"{name}/pool")
    else:
        s = net.mean_hw(x, f"{name}/pool")
    s = net.conv(s, max(8, c // reduction), 1, 1, "RELU", name=f"{name}/squeeze")
    s = net.conv(s, c, 1, 1, "NONE", name=f"{name}/excite")
    s = net.unary("LOGISTIC", s, name=f"{name}/sigmoid")
    return net.binary("MUL", x, s, name=f"{name}/mul")


def mobilenet_v2(seed: int = 0) -> bytes:
    """MobileNet v2 1.0 224: 66 ops (36 CONV_2D, 17 DEPTHWISE_CONV_2D, 10 ADD, AVERAGE_POOL_2D, RESHAPE,
    SOFTMAX)."""
    net = Net(seed, f"gpuengine.zoo mobilenet_v2 (random weights, seed={seed})")
    x = net.input("input", (1, 224, 224, 3))
    x = net.conv(x, 32, 3, 2, "RELU6", name="MobilenetV2/Conv")
    block = 0
    for t, c, n, s in V2_GROUPS:
        for i in range(n):
            name = "MobilenetV2/expanded_conv" + (f"_{block}" if block else "")
            x = inverted_residual(net, x, t, c, s if i == 0 else 1, name)
            block += 1
    x = net.conv(x, 1280, 1, 1, "RELU6", name="MobilenetV2/Conv_1")
    x = net.global_avg_pool(x, "MobilenetV2/Logits/AvgPool")
    x = net.conv(x, NUM_CLASSES, 1, 1, "NONE", name="MobilenetV2/Logits/Conv2d_1c_1x1", gain=_LOGIT_GAIN)
    x = net.reshape(x, (1, NUM_CLASSES), "MobilenetV2/Logits/Squeeze")
    return net.build(net.softmax(x, "MobilenetV2/Predictions/Softmax"))
