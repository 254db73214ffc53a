"""Reference models built with the project's own flatbuffer writer and seeded random weights (no TensorFlow).

They give every machine, offline, models with the op structure of real ones, for the CLI, benchmarks and
GPU-vs-LiteRT tests. `get(name, seed)` builds once per process and caches the bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .bert import bert_tiny
from .decoder import DecoderConfig, decoder, decoder_smollm_shape, decoder_tiny, decoder_tiny_f32
from .efficientnet import efficientnet_b0
from .mobilenet import mobilenet_v1, mobilenet_v2
from .mobilenet_v3 import mobilenet_v3_small
from .quantize import mobilenet_v2_int8
from .segmentation import segmentation
from .tiny import tiny
from .vit import vit_tiny

__all__ = ["DEFAULT", "MODELS", "DecoderConfig", "bert_tiny", "decoder", "decoder_smollm_shape", "decoder_tiny",
           "decoder_tiny_f32", "efficientnet_b0", "get", "mobilenet_v1", "mobilenet_v2",
           "mobilenet_v2_int8", "mobilenet_v3_small", "segmentation", "tiny", "vit_tiny"]

# name -> build(seed: int = 0) -> .tflite bytes
MODELS: dict[str, Callable[..., bytes]] = {
    "bert_tiny": bert_tiny,
    "decoder_tiny": decoder_tiny,
    "efficientnet_b0": efficientnet_b0,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v2_int8": mobilenet_v2_int8,
    "mobilenet_v3_small": mobilenet_v3_small,
    "segmentation": segmentation,
    "tiny": tiny,
    "vit_tiny": vit_tiny,
}
DEFAULT = "mobilenet_v2"


@functools.cache
def _build(name: str, seed: int) -> bytes:
    return MODELS[name](seed)


def get(name: str, seed: int = 0) -> bytes:
    """The .tflite bytes of zoo model `name`, built once per (name, seed) in this process."""
    if name not in MODELS:
        raise KeyError(f"no zoo model named {name!r}; the zoo has: {', '.join(MODELS)}")
    return _build(name, int(seed))
