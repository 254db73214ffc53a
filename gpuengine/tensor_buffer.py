"""LiteRT's module name (ai_edge_litert.tensor_buffer), so that swapping the package in
`from ai_edge_litert.tensor_buffer import TensorBuffer` works unchanged; the code is in gpuengine/api/."""

from .api.tensor_buffer import TensorBuffer

__all__ = ["TensorBuffer"]
