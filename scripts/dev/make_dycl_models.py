"""Make DyCL's dynamic networks as .tflite test fixtures with Keras (tests/fixtures/dycl/).

Run with a TensorFlow of its own (never a gpuengine dependency):
    python3 -m venv /path/tfvenv && /path/tfvenv/bin/pip install tensorflow-cpu
    /path/tfvenv/bin/python scripts/dev/make_dycl_models.py tests/fixtures/dycl

Three models, Keras layers called inside a `tf.function` with TF2 control flow, so the converter keeps it as
TFLite IF / WHILE ops with their branches and bodies as subgraphs:

* shallow_deep.tflite (Shallow-Deep, early exit): two convs, then an early classifier (mean pool -> dense ->
  softmax); `tf.cond` on its confidence (largest probability > a threshold) returns the early answer, else runs
  the deep part (two more convs, pool, dense, softmax).
* skipnet.tflite (SkipNet, block skipping): a stem conv; a gate (mean pool -> dense -> sigmoid) > 0.5 decides by
  `tf.cond` whether the residual block (two convs) runs or is skipped; then a head conv, pool and dense.
* encoder_decoder.tflite (a generation loop): an encoder (dense + tanh over 8 source steps, mean over time)
  gives a context; `tf.while_loop` runs a recurrent decoder cell (dense over [state, last output, context],
  tanh; an output softmax) `steps` times, `steps` an input, so the loop length is decided per invoke.

Weights: Keras' default initializers under keras.utils.set_random_seed(SEED). The thresholds are set from a few
seeded random inputs (the median confidence / gate value), so that some inputs take each branch; `inputs.npz`
holds inputs and, per input, the branch TensorFlow took (1 = the IF's then-branch) for the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

keras = tf.keras
SEED = 34
H = W = 16


def _convert(module: tf.Module, fn: tf.types.experimental.PolymorphicFunction) -> bytes:
    """The function with its variables frozen into constants (weights in the file, as a trained model ships),
    control flow kept functional (IF / WHILE, not lowered to switch/merge)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(), lower_control_flow=False)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen], module)
    return converter.convert()


def _inputs(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> np.ndarray:
    """Random inputs at a spread of scales, so confidences and gates spread too."""
    scales = np.linspace(0.2, 2.0, n).astype(np.float32)
    return np.stack([rng.uniform(-1, 1, shape).astype(np.float32) * s for s in scales])


class ShallowDeep(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = keras.layers.Conv2D(8, 3, padding="same", activation="relu")
        self.conv2 = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")
        self.early = keras.layers.Dense(4)
        self.conv3 = keras.layers.Conv2D(16, 3, padding="same", activation="relu")
        self.conv4 = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")
        self.deep = keras.layers.Dense(4)
        self.threshold = tf.Variable(0.5, trainable=False)

    def parts(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        feat = self.conv2(self.conv1(x))
        early = tf.nn.softmax(self.early(tf.reduce_mean(feat, axis=[1, 2])))
        return feat, early, tf.reduce_max(early)

    def deep_head(self, feat: tf.Tensor) -> tf.Tensor:
        y = self.conv4(self.conv3(feat))
        return tf.nn.softmax(self.deep(tf.reduce_mean(y, axis=[1, 2])))

    @tf.function(input_signature=[tf.TensorSpec([1, H, W, 3], tf.float32)])
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        feat, early, confidence = self.parts(x)
        return tf.cond(confidence > self.threshold, lambda: early, lambda: self.deep_head(feat))


class SkipNet(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = keras.layers.Conv2D(8, 3, padding="same", activation="relu")
        self.gate = keras.layers.Dense(1)
        self.block_a = keras.layers.Conv2D(8, 3, padding="same", activation="relu")
        self.block_b = keras.layers.Conv2D(8, 3, padding="same")
        self.head = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")
        self.out = keras.layers.Dense(4)
        self.threshold = tf.Variable(0.5, trainable=False)

    def gate_value(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        feat = self.stem(x)
        return feat, tf.reduce_max(tf.sigmoid(self.gate(tf.reduce_mean(feat, axis=[1, 2]))))

    @tf.function(input_signature=[tf.TensorSpec([1, H, W, 3], tf.float32)])
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        feat, gate = self.gate_value(x)
        feat = tf.cond(gate > self.threshold, lambda: tf.nn.relu(feat + self.block_b(self.block_a(feat))),
                       lambda: feat)
        return self.out(tf.reduce_mean(self.head(feat), axis=[1, 2]))


class EncoderDecoder(tf.Module):
    SRC, WIDTH, VOCAB = 8, 16, 8

    def __init__(self) -> None:
        super().__init__()
        self.encoder = keras.layers.Dense(self.WIDTH, activation="tanh")
        self.init = keras.layers.Dense(self.WIDTH, activation="tanh")
        self.cell = keras.layers.Dense(self.WIDTH, activation="tanh")
        self.emit = keras.layers.Dense(self.VOCAB)

    @tf.function(input_signature=[tf.TensorSpec([1, SRC, 12], tf.float32), tf.TensorSpec([1], tf.float32)])
    def __call__(self, src: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
        context = tf.reduce_mean(self.encoder(src), axis=1)  # [1, WIDTH]
        state = self.init(context)
        out = tf.zeros([1, self.VOCAB])
        i = tf.zeros([1])

        def cond(i: tf.Tensor, state: tf.Tensor, out: tf.Tensor) -> tf.Tensor:
            return tf.reduce_all(i < steps)

        def body(i: tf.Tensor, state: tf.Tensor, out: tf.Tensor) -> list[tf.Tensor]:
            state = self.cell(tf.concat([state, out, context], axis=1))
            return [i + 1.0, state, tf.nn.softmax(self.emit(state))]

        _, state, out = tf.while_loop(cond, body, [i, state, out])
        return out


def main(outdir: str) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED)
    saved: dict[str, np.ndarray] = {}

    sd = ShallowDeep()
    xs = _inputs(rng, 12, (1, H, W, 3))
    conf = np.array([float(sd.parts(tf.constant(x))[2]) for x in xs])
    sd.threshold.assign(float(np.median(conf)))
    (out / "shallow_deep.tflite").write_bytes(_convert(sd, sd.__call__))
    saved["shallow_deep_x"] = xs
    saved["shallow_deep_then"] = (conf > sd.threshold.numpy()).astype(np.int32)

    sk = SkipNet()
    xs = _inputs(rng, 12, (1, H, W, 3))
    gates = np.array([float(sk.gate_value(tf.constant(x))[1]) for x in xs])
    sk.threshold.assign(float(np.median(gates)))
    (out / "skipnet.tflite").write_bytes(_convert(sk, sk.__call__))
    saved["skipnet_x"] = xs
    saved["skipnet_then"] = (gates > sk.threshold.numpy()).astype(np.int32)

    ed = EncoderDecoder()
    ed(tf.zeros([1, ed.SRC, 12]), tf.ones([1]))
    (out / "encoder_decoder.tflite").write_bytes(_convert(ed, ed.__call__))
    saved["encoder_decoder_src"] = _inputs(rng, 4, (1, ed.SRC, 12))
    saved["encoder_decoder_steps"] = np.array([[0.0], [1.0], [3.0], [6.0]], np.float32)
    np.savez(out / "inputs.npz", **saved)
    for name in ("shallow_deep", "skipnet"):
        print(name, "then-branch per input:", saved[f"{name}_then"].tolist())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/dycl")
