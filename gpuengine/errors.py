"""Errors a user can act on: each message says what is wrong and what to do about it."""


class GpuEngineError(Exception):
    """Base class of every error gpuengine raises on purpose."""


class ModelError(GpuEngineError, ValueError):
    """The .tflite file is malformed or uses something the format does not allow."""


class UnsupportedOpError(GpuEngineError):
    """An op cannot run on the GPU and no CPU fallback is available."""


class AdapterError(GpuEngineError, RuntimeError):
    """No usable WebGPU adapter, or the one asked for does not exist."""
