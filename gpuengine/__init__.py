"""gpuengine: run TensorFlow Lite models on any GPU through WebGPU, with hand-written WGSL kernels."""

from __future__ import annotations

from typing import Any

from .api import CompiledModel, HardwareAccelerator, Interpreter, SignatureRunner, TensorBuffer
from .errors import AdapterError, GpuEngineError, ModelError, UnsupportedOpError
from .runtime.graph import InvokeJob

__version__ = "0.1.0"
__all__ = ["AdapterError", "CompiledModel", "GpuEngineError", "HardwareAccelerator", "Interpreter", "InvokeJob",
           "ModelError", "SignatureRunner", "TensorBuffer", "UnsupportedOpError", "__version__", "get_device"]


def get_device(adapter: str | None = "auto", profile: str | None = None, webgpu: str | None = None) -> Any:
    """The wgpu.GPUDevice gpuengine runs on for an adapter choice ("auto", "hardware", "software" or part of an
    adapter name), created once per choice: pass it as Interpreter(..., device=...) to put several models on one
    device, where they can share GPU buffers (set_input_buffer / output_buffer). profile: "full" (default; env
    GPUENGINE_DEVICE) or "baseline", a device with no optional feature and WebGPU's default limits. webgpu: the
    implementation, "wgpu" or "dawn" (default env GPUENGINE_WEBGPU, else "wgpu")."""
    from .options import engine_options
    from .runtime.device import get_device as engine_device

    return engine_device(adapter, profile, engine_options(webgpu=webgpu).webgpu).device
