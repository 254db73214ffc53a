"""Language-model serving above the Interpreter: bundles (.litertlm, .task, .tflite + tokenizer), tokenizers,
sessions keeping the KV cache, sampling, generate, and a decode loop that stays on the GPU."""

from .bundle import Bundle, open_bundle
from .engine import Engine, LoopStats, Session
from .sampling import SamplerConfig

__all__ = ["Bundle", "Engine", "LoopStats", "SamplerConfig", "Session", "open_bundle"]
