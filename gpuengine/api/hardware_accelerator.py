"""LiteRT's HardwareAccelerator flags, for `CompiledModel.from_file(..., hardware_accel=...)`."""

from __future__ import annotations

import enum


class HardwareAccelerator(enum.IntFlag):
    """The same bit values as ai_edge_litert.hardware_accelerator.HardwareAccelerator (either may be passed).

    GPU (alone or with CPU / NPU): gpuengine's WebGPU kernels, with LiteRT's CPU kernels for what the GPU does not
    run. CPU alone: the model runs on LiteRT's own CompiledModel. NPU alone: not available here.
    """

    CPU = enum.auto()
    GPU = enum.auto()
    NPU = enum.auto()
