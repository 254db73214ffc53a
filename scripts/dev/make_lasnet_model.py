"""Make a LASNet-style spatially masked residual block as a .tflite fixture with Keras (tests/fixtures/lasnet/).

Run with a TensorFlow of its own (never a gpuengine dependency):
    /path/tfvenv/bin/python scripts/dev/make_lasnet_model.py tests/fixtures/lasnet
    /path/tfvenv/bin/python scripts/dev/make_lasnet_model.py OUTDIR --size 64 --channels 32   # a bench variant

The block, as Keras-built LASNet-style models convert to TFLite:
    mask = Resizing(32, 32, nearest)(cast(Conv2D(1, 1)(AveragePooling2D(4)(x)) > 0))   # the masker, 4x4 cells
    y = x + Conv2D(C, 3, same)(Conv2D(C, 3, same, relu)(x)) * mask
(Keras 3's UpSampling2D converts to rank-5 RESHAPE + TILE; Resizing to RESIZE_NEAREST_NEIGHBOR.)
x is [1, 32, 32, 16] (the test fixture; --size / --channels make larger bench variants, named by their shape).
The masker's 1x1 conv averages the channels (weights 1/C, bias 0), so a cell is active when
the mean of x over its 4x4 pixels and channels is positive: `lasnet_input(rate, seed)` in the tests makes inputs
with a chosen fraction of active cells. The block's convs: Keras' default initializers under seed 34, scaled by
1/2 to keep activations near 1.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

keras = tf.keras
SEED, CELL = 34, 4


class LasnetBlock(tf.Module):
    def __init__(self, h: int, w: int, c: int) -> None:
        super().__init__()
        self.shape = (h, w, c)
        self.pool = keras.layers.AveragePooling2D(CELL)
        self.masker = keras.layers.Conv2D(1, 1, kernel_initializer=keras.initializers.Constant(1.0 / c),
                                          bias_initializer="zeros")
        self.up = keras.layers.Resizing(h, w, interpolation="nearest")
        self.conv1 = keras.layers.Conv2D(c, 3, padding="same", activation="relu")
        self.conv2 = keras.layers.Conv2D(c, 3, padding="same")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        mask = self.up(tf.cast(self.masker(self.pool(x)) > 0.0, tf.float32))
        return x + self.conv2(self.conv1(x)) * mask


def main(outdir: str, size: int = 32, channels: int = 16) -> None:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(SEED)
    block = LasnetBlock(size, size, channels)
    block(tf.zeros([1, size, size, channels]))
    for layer in (block.conv1, block.conv2):
        for v in layer.weights:
            v.assign(v * 0.5)
    call = tf.function(block.__call__, input_signature=[tf.TensorSpec([1, size, size, channels], tf.float32)])
    frozen = convert_variables_to_constants_v2(call.get_concrete_function())
    data = tf.lite.TFLiteConverter.from_concrete_functions([frozen], block).convert()
    name = "lasnet_block.tflite" if (size, channels) == (32, 16) else f"lasnet_block_{size}x{size}x{channels}.tflite"
    (out / name).write_bytes(data)
    print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("outdir", nargs="?", default="tests/fixtures/lasnet")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--channels", type=int, default=16)
    args = parser.parse_args()
    main(args.outdir, args.size, args.channels)
