"""Language-model serving above the Interpreter: bundles (.litertlm, .task, .tflite + tokenizer), tokenizers,
sessions keeping the KV cache (several per engine, each its own), chat templates and conversations, sampling,
generate, and a decode loop that stays on the GPU."""

from .bundle import Bundle, open_bundle
from .chat import ChatTemplate, TemplateError
from .conversation import Conversation
from .engine import Engine, LoopStats, Session
from .sampling import SamplerConfig

__all__ = ["Bundle", "ChatTemplate", "Conversation", "Engine", "LoopStats", "SamplerConfig", "Session",
           "TemplateError", "open_bundle"]
