"""EfficientNet-B0 (224): the layer structure of Keras' EfficientNetB0, batch norm folded into conv biases, seeded
random weights.

What it adds to the zoo: swish written as ops, MUL(x, LOGISTIC(x)), as TFLite converters emit it (x is read
twice, so only passes/fuse_elementwise_tree.py lets it fuse into the conv producing x), 5x5 depthwise convs, and a
squeeze-excitation in every block (MEAN -> 1x1 conv + swish -> 1x1 conv -> LOGISTIC -> MUL(x, gate), the MUL
evaluated by the projection conv while loading its input: passes/fuse_input_expression.py). Input
[1, 224, 224, 3] in [-1, 1], output [1, 1000] probabilities.
"""

from __future__ import annotations

from .calibrated import CalibratedNet

# (kernel, repeats, output channels, expansion, first stride) of B0's seven stages: 16 MBConv blocks.
B0_STAGES: tuple[tuple[int, int, int, int, int], ...] = (
    (3, 1, 16, 1, 1), (3, 2, 24, 6, 2), (5, 2, 40, 6, 2), (3, 3, 80, 6, 2),
    (5, 3, 112, 6, 1), (5, 4, 192, 6, 2), (3, 1, 320, 6, 1),
)
STEM_CHANNELS, HEAD_CHANNELS, NUM_CLASSES = 32, 1280, 1000
SE_RATIO = 0.25  # of the block's input channels, as in Keras
# RMS of the conv outputs on the calibration input (CalibratedNet.normalized, like a folded batch norm): swish
# and gate LOGISTIC inputs stay within about +-10 and the gates mostly unsaturated; a block's output has RMS 1,
# a residual branch adds half of that (the stream grows slowly over chained ADDs); the logits spread enough for
# a non-flat softmax. Checked on every intermediate tensor in LiteRT (for another input than the calibration's).
_ACT_RMS, _GATE_RMS, _BLOCK_RMS, _RESIDUAL_RMS, _LOGIT_RMS = 1.5, 1.5, 1.0, 0.5, 2.5


def swish(net: CalibratedNet, x: int, name: str) -> int:
    """x * sigmoid(x) as two ops, reading x twice."""
    return net.binary("MUL", x, net.unary("LOGISTIC", x, f"{name}/sigmoid"), f"{name}/mul")


def squeeze_excite(net: CalibratedNet, x: int, se_channels: int, name: str) -> int:
    """MEAN -> 1x1 conv (swish) -> 1x1 conv -> LOGISTIC -> MUL(x, gate)."""
    c = net.shape(x)[3]
    s = net.mean_hw(x, f"{name}/squeeze")
    s = net.normalized("CONV_2D", s, se_channels, name=f"{name}/reduce", rms=_ACT_RMS)
    s = net.normalized("CONV_2D", swish(net, s, f"{name}/reduce"), c, name=f"{name}/expand", rms=_GATE_RMS)
    return net.binary("MUL", x, net.unary("LOGISTIC", s, f"{name}/sigmoid"), f"{name}/excite")


def mbconv(net: CalibratedNet, x: int, kernel: int, out_ch: int, expansion: int, stride: int, name: str) -> int:
    """1x1 expand + swish (none at expansion 1), kxk depthwise + swish, SE, 1x1 projection, residual ADD."""
    in_ch = net.shape(x)[3]
    residual = stride == 1 and in_ch == out_ch
    h = x
    if expansion != 1:
        h = swish(net, net.normalized("CONV_2D", h, in_ch * expansion, name=f"{name}/expand", rms=_ACT_RMS),
                  f"{name}/expand")
    h = net.normalized("DEPTHWISE_CONV_2D", h, k=kernel, stride=stride, name=f"{name}/depthwise", rms=_ACT_RMS)
    h = squeeze_excite(net, swish(net, h, f"{name}/depthwise"), max(1, int(in_ch * SE_RATIO)), f"{name}/se")
    h = net.normalized("CONV_2D", h, out_ch, name=f"{name}/project",
                       rms=_RESIDUAL_RMS * _BLOCK_RMS if residual else _BLOCK_RMS)
    return net.binary("ADD", x, h, f"{name}/add") if residual else h


def efficientnet_b0(seed: int = 0) -> bytes:
    """EfficientNet-B0: stem conv 3x3/2 + swish, 16 MBConv blocks with SE, head 1x1 conv 1280 + swish, MEAN,
    FULLY_CONNECTED 1000, SOFTMAX (239 ops)."""
    net = CalibratedNet(seed, f"gpuengine.zoo efficientnet_b0 (random weights, seed={seed})")
    x = net.input("input", (1, 224, 224, 3))
    x = swish(net, net.normalized("CONV_2D", x, STEM_CHANNELS, 3, 2, "stem/conv", rms=_ACT_RMS), "stem")
    block = 0
    for kernel, repeats, out_ch, expansion, stride in B0_STAGES:
        for i in range(repeats):
            x = mbconv(net, x, kernel, out_ch, expansion, stride if i == 0 else 1, f"block{block}")
            block += 1
    x = swish(net, net.normalized("CONV_2D", x, HEAD_CHANNELS, name="head/conv", rms=_ACT_RMS), "head")
    x = net.mean_hw(x, "head/pool", keep_dims=False)
    x = net.normalized("FULLY_CONNECTED", x, NUM_CLASSES, name="head/classifier", rms=_LOGIT_RMS)
    return net.build(net.softmax(x, "probabilities"))
