"""LiteRT's module name (ai_edge_litert.hardware_accelerator), so that swapping the package in
`from ai_edge_litert.hardware_accelerator import HardwareAccelerator` works unchanged; the code is in
gpuengine/api/."""

from .api.hardware_accelerator import HardwareAccelerator

__all__ = ["HardwareAccelerator"]
