"""Make a LASNet-style spatially masked residual block as a .tflite fixture with Keras (tests/fixtures/lasnet/).

Run with a TensorFlow of its own (never a gpuengine dependency):
    /path/tfvenv/bin/python scripts/dev/make_lasnet_model.py tests/fixtures/lasnet

The block, as Keras-built LASNet-style models convert to TFLite:
    mask = Resizing(32, 32, nearest)(cast(Conv2D(1, 1)(AveragePooling2D(4)(x)) > 0))   # the masker, 4x4 cells
    y = x + Conv2D(C, 3, same)(Conv2D(C, 3, same, relu)(x)) * mask
(Keras 3's UpSampling2D converts to rank-5 RESHAPE + TILE; Resizing to RESIZE_NEAREST_NEIGHBOR.)
x is [1, 32, 32, 16]. The masker's 1x1 conv averages the channels (weights 1/C, bias 0), so a cell is active when
the mean of x over its 4x4 pixels and channels is positive: `lasnet_input(rate, seed)` in the tests makes inputs
with a chosen fraction of active cells. The block's convs: Keras' default initializers under seed 34, scaled by
1/2 to keep activations near 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tensorflow as tf

keras = tf.keras
SEED, H, W, C, CELL = 34, 32, 32, 16, 4


class LasnetBlock(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = keras.layers.AveragePooling2D(CELL)
        self.masker = keras.layers.Conv2D(1, 1, kernel_initializer=keras.initializers.Constant(1.0 / C),
                                          bias_initializer="zeros")
        self.up = keras.layers.Resizing(H, W, interpolation="nearest")
        self.conv1 = keras.layers.Conv2D(C, 3, padding="same", activation="relu")
        self.conv2 = keras.layers.Conv2D(C, 3, padding="same")

    @tf.function(input_signature=[tf.TensorSpec([1, H, W, C], tf.float32)])
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        mask = self.up(tf.cast(self.masker(self.pool(x)) > 0.0, tf.float32))
        return x + self.conv2(self.conv1(x)) * mask


def main(outdir: str) -> None:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(SEED)
    block = LasnetBlock()
    block(tf.zeros([1, H, W, C]))
    for layer in (block.conv1, block.conv2):
        for v in layer.weights:
            v.assign(v * 0.5)
    frozen = convert_variables_to_constants_v2(block.__call__.get_concrete_function())
    data = tf.lite.TFLiteConverter.from_concrete_functions([frozen], block).convert()
    (out / "lasnet_block.tflite").write_bytes(data)
    print(f"lasnet_block.tflite: {len(data)} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/lasnet")
