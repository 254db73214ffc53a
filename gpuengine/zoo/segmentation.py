"""A small portrait-segmentation net shaped like MediaPipe selfie segmentation, with seeded random weights.

It covers what classifiers do not: HARD_SWISH, squeeze-excitation (pool -> conv -> LOGISTIC -> broadcast MUL),
RESIZE_BILINEAR upsampling with skip ADDs and a per-pixel 2-class SOFTMAX on a full-resolution output.
Input [1, 256, 256, 3] in [-1, 1]; output [1, 256, 256, 2] (background, person).
"""

from __future__ import annotations

from .mobilenet import Net, inverted_residual

SIZE = 256

# Blocks after the stride-2 HARD_SWISH stem: (expansion, out channels, kernel, stride, activation, SE)
ENCODER: tuple[tuple[int, int, int, int, str, bool], ...] = (
    (1, 16, 3, 2, "RELU", True),         # 1/4   64x64x16  (skip)
    (4, 24, 3, 2, "RELU", False),        # 1/8   32x32x24
    (3, 24, 3, 1, "RELU", False),        # 1/8   32x32x24  (skip)
    (4, 40, 5, 2, "HARD_SWISH", True),   # 1/16  16x16x40
    (6, 40, 5, 1, "HARD_SWISH", True),   # 1/16  16x16x40
    (3, 48, 5, 1, "HARD_SWISH", True),   # 1/16  16x16x48
)
SKIP_BLOCKS = (0, 2)


def segmentation(seed: int = 0) -> bytes:
    """Encoder to 1/16 with SE blocks, 3-stage bilinear decoder with skip ADDs, 2-class softmax at 256x256."""
    net = Net(seed, f"gpuengine.zoo segmentation (random weights, seed={seed})")
    x = net.input("input", (1, SIZE, SIZE, 3))
    h = net.conv(x, 16, 3, 2, "HARD_SWISH", "stem")  # 1/2, 128x128x16 (skip)
    skips = [h]
    for i, (t, c, k, s, act, se) in enumerate(ENCODER):
        h = inverted_residual(net, h, t, c, s, f"encoder/block{i}", k=k, act=act, se=se)
        if i in SKIP_BLOCKS:
            skips.append(h)
    # Decoder stage: 1x1 to the skip's channels, upsample x2, add the skip, refine (depthwise-separable pair).
    for j, skip in enumerate(reversed(skips)):
        _, sh, sw, sc = net.shape(skip)
        name = f"decoder/stage{j}"
        h = net.conv(h, sc, 1, 1, "RELU", f"{name}/reduce")
        h = net.resize_bilinear(h, (sh, sw), f"{name}/upsample")
        h = net.binary("ADD", h, skip, f"{name}/skip_add")
        h = net.dwconv(h, 3, 1, "RELU", f"{name}/refine_dw")
        h = net.conv(h, sc, 1, 1, "RELU", f"{name}/refine_pw")
    logits = net.conv(h, 2, 1, 1, "NONE", "head/conv", gain=2.0)  # 128x128x2
    logits = net.resize_bilinear(logits, (SIZE, SIZE), "head/upsample")
    return net.build(net.softmax(logits, "segmentation"))
