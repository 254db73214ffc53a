"""gpuengine: run TensorFlow Lite models on any GPU through WebGPU, with hand-written WGSL kernels."""

from .errors import AdapterError, GpuEngineError, ModelError, UnsupportedOpError
from .interpreter import Interpreter, SignatureRunner

__version__ = "0.1.0"
__all__ = ["AdapterError", "GpuEngineError", "Interpreter", "ModelError", "SignatureRunner",
           "UnsupportedOpError", "__version__"]
