"""LiteRT's module name (ai_edge_litert.interpreter), so that swapping the package in
`from ai_edge_litert.interpreter import Interpreter` works unchanged; the code is in gpuengine/api/."""

from .api.interpreter import Interpreter, SignatureRunner

__all__ = ["Interpreter", "SignatureRunner"]
