"""A tiny classifier (8 ops, 394 parameters) for the CLI's default smoke run and fast tests.

Small enough to build and run in milliseconds, yet it has the common MobileNet ops and a residual fork/join,
so a broken kernel, buffer-reuse plan or dispatch order shows up in it.
"""

from __future__ import annotations

from .mobilenet import Net

INPUT_SHAPE = (1, 32, 32, 3)
CLASSES = 10


def tiny(seed: int = 0) -> bytes:
    """CONV_2D s2 RELU6 -> DEPTHWISE_CONV_2D -> ADD (residual) -> RELU6 -> AVERAGE_POOL_2D -> 1x1 CONV_2D
    -> RESHAPE -> SOFTMAX; input [1, 32, 32, 3], output [1, 10]."""
    net = Net(seed, f"gpuengine.zoo tiny (random weights, seed={seed})")
    x = net.input("input", INPUT_SHAPE)
    a = net.conv(x, 8, 3, 2, "RELU6", "conv")                   # [1, 16, 16, 8]
    b = net.dwconv(a, 3, 1, "NONE", "depthwise", gain=0.7)
    h = net.unary("RELU6", net.binary("ADD", a, b, "add"), "relu6")
    h = net.global_avg_pool(h, "pool")                          # [1, 1, 1, 8]
    h = net.conv(h, CLASSES, 1, 1, "NONE", "logits", gain=3.0)  # pooled features are small; spread the logits
    h = net.reshape(h, (1, CLASSES), "squeeze")
    return net.build(net.softmax(h, "probabilities"))
