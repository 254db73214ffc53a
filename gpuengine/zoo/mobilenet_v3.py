"""MobileNet v3 small (1.0, 224): the layer structure of Keras' MobileNetV3Small, batch norm folded into conv
biases, seeded random weights.

What it adds to the zoo: hard-swish written as ops, as converters emit it from graphs that spell it out (x read
twice: x * RELU6(x + 3) / 6 with a DIV in the stem and head, Keras' x * (RELU6(x + 3) * 1/6) in the blocks), so
only passes/fuse_elementwise_tree.py lets it fuse into the conv producing x; squeeze-excitation gates with a
hard sigmoid RELU6(x + 3) * 1/6 written as ops (a chain: epilogue fusion takes it); RELU blocks; 5x5 depthwise
convs. Input [1, 224, 224, 3] in [-1, 1], output [1, 1000] probabilities.
"""

from __future__ import annotations

from .calibrated import CalibratedNet

# (kernel, expanded channels, output channels, SE, activation, stride) of the 11 bneck blocks (paper, Table 2).
V3_SMALL_BLOCKS: tuple[tuple[int, int, int, bool, str, int], ...] = (
    (3, 16, 16, True, "RELU", 2), (3, 72, 24, False, "RELU", 2), (3, 88, 24, False, "RELU", 1),
    (5, 96, 40, True, "HARD_SWISH", 2), (5, 240, 40, True, "HARD_SWISH", 1), (5, 240, 40, True, "HARD_SWISH", 1),
    (5, 120, 48, True, "HARD_SWISH", 1), (5, 144, 48, True, "HARD_SWISH", 1), (5, 288, 96, True, "HARD_SWISH", 2),
    (5, 576, 96, True, "HARD_SWISH", 1), (5, 576, 96, True, "HARD_SWISH", 1),
)
STEM_CHANNELS, LAST_CONV, LAST_POINT, NUM_CLASSES = 16, 576, 1024, 1000
# RMS of the conv outputs on the calibration input (CalibratedNet.normalized, like a folded batch norm): the
# hard-swish inputs reach its curved part (-3..3) and beyond, the SE gates' hard-sigmoid inputs mostly stay inside
# it (unsaturated); a block's output has RMS 1, a residual branch adds half of that; the logits spread enough for
# a non-flat softmax. Checked on every intermediate tensor in LiteRT (for another input than the calibration's).
_ACT_RMS, _GATE_RMS, _BLOCK_RMS, _RESIDUAL_RMS, _LOGIT_RMS = 2.0, 1.5, 1.0, 0.5, 2.5


def _depth(v: float, divisor: int = 8) -> int:
    """Keras' channel rounding: to a multiple of 8, at least 8, never below 90% of v."""
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


def hard_sigmoid(net: CalibratedNet, x: int, name: str) -> int:
    """RELU6(x + 3) * (1/6) as ops."""
    r = net.unary("RELU6", net.binary("ADD", x, net.scalar(3.0), f"{name}/add"), f"{name}/relu6")
    return net.binary("MUL", r, net.scalar(1.0 / 6.0), f"{name}/mul")


def hard_swish(net: CalibratedNet, x: int, name: str, divide: bool = False) -> int:
    """x * hard_sigmoid(x) as ops (Keras), or with divide: x * RELU6(x + 3) / 6."""
    if not divide:
        return net.binary("MUL", x, hard_sigmoid(net, x, name), f"{name}/hard_swish")
    r = net.unary("RELU6", net.binary("ADD", x, net.scalar(3.0), f"{name}/add"), f"{name}/relu6")
    return net.binary("DIV", net.binary("MUL", x, r, f"{name}/mul"), net.scalar(6.0), f"{name}/div")


def _conv_act(net: CalibratedNet, code: str, x: int, out_ch: int, k: int, stride: int, act: str, name: str) -> int:
    """A normalized conv with RELU fused or hard-swish (Keras form) as ops after it."""
    if act == "RELU":
        return net.normalized(code, x, out_ch, k, stride, name, rms=_ACT_RMS, act="RELU")
    return hard_swish(net, net.normalized(code, x, out_ch, k, stride, name, rms=_ACT_RMS), name)


def squeeze_excite(net: CalibratedNet, x: int, name: str) -> int:
    """Global AVERAGE_POOL_2D -> 1x1 conv RELU -> 1x1 conv -> hard sigmoid -> MUL(x, gate)."""
    c = net.shape(x)[3]
    s = net.global_avg_pool(x, f"{name}/squeeze")
    s = net.normalized("CONV_2D", s, _depth(c * 0.25), name=f"{name}/reduce", rms=_ACT_RMS, act="RELU")
    s = net.normalized("CONV_2D", s, c, name=f"{name}/expand", rms=_GATE_RMS)
    return net.binary("MUL", x, hard_sigmoid(net, s, f"{name}/gate"), f"{name}/excite")


def bneck(net: CalibratedNet, x: int, kernel: int, expanded: int, out_ch: int, se: bool, act: str, stride: int,
          name: str, expand: bool = True) -> int:
    """1x1 expand (not in the first block), kxk depthwise, optional SE, 1x1 linear projection, residual ADD."""
    in_ch = net.shape(x)[3]
    residual = stride == 1 and in_ch == out_ch
    h = _conv_act(net, "CONV_2D", x, expanded, 1, 1, act, f"{name}/expand") if expand else x
    h = _conv_act(net, "DEPTHWISE_CONV_2D", h, 0, kernel, stride, act, f"{name}/depthwise")
    if se:
        h = squeeze_excite(net, h, f"{name}/se")
    h = net.normalized("CONV_2D", h, out_ch, name=f"{name}/project",
                       rms=_RESIDUAL_RMS * _BLOCK_RMS if residual else _BLOCK_RMS)
    return net.binary("ADD", x, h, f"{name}/add") if residual else h


def mobilenet_v3_small(seed: int = 0) -> bytes:
    """MobileNet v3 small: stem conv 3x3/2 + hard-swish, 11 bneck blocks, 1x1 conv 576 + hard-swish, global pool,
    1x1 conv 1024 + hard-swish, 1x1 conv classifier, RESHAPE, SOFTMAX."""
    net = CalibratedNet(seed, f"gpuengine.zoo mobilenet_v3_small (random weights, seed={seed})")
    x = net.input("input", (1, 224, 224, 3))
    x = hard_swish(net, net.normalized("CONV_2D", x, STEM_CHANNELS, 3, 2, "stem/conv", rms=_ACT_RMS), "stem",
                   divide=True)
    for i, (kernel, expanded, out_ch, se, act, stride) in enumerate(V3_SMALL_BLOCKS):
        x = bneck(net, x, kernel, expanded, out_ch, se, act, stride, f"block{i}", expand=i > 0)
    x = hard_swish(net, net.normalized("CONV_2D", x, LAST_CONV, name="head/conv", rms=_ACT_RMS), "head/conv",
                   divide=True)
    x = net.global_avg_pool(x, "head/pool")
    x = hard_swish(net, net.normalized("CONV_2D", x, LAST_POINT, name="head/point", rms=_ACT_RMS), "head/point")
    x = net.normalized("CONV_2D", x, NUM_CLASSES, name="head/logits", rms=_LOGIT_RMS)
    x = net.reshape(x, (1, NUM_CLASSES), "head/flatten")
    return net.build(net.softmax(x, "probabilities"))
