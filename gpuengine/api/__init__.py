"""The user-facing API: Interpreter and SignatureRunner (LiteRT's interpreter), CompiledModel, TensorBuffer and
HardwareAccelerator (LiteRT's compiled-model API). Re-exported by the gpuengine package."""

from .compiled_model import CompiledModel
from .hardware_accelerator import HardwareAccelerator
from .interpreter import Interpreter, SignatureRunner
from .tensor_buffer import TensorBuffer

__all__ = ["CompiledModel", "HardwareAccelerator", "Interpreter", "SignatureRunner", "TensorBuffer"]
