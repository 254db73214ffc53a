"""LiteRT's module name (ai_edge_litert.compiled_model), so that swapping the package in
`from ai_edge_litert.compiled_model import CompiledModel` works unchanged; the code is in gpuengine/api/."""

from .api.compiled_model import CompiledModel
from .api.hardware_accelerator import HardwareAccelerator
from .api.tensor_buffer import TensorBuffer

__all__ = ["CompiledModel", "HardwareAccelerator", "TensorBuffer"]
