"""The environment variables gpuengine reads, in one place: user-facing defaults only (an explicit argument
always wins). Nothing else in the package reads os.environ."""

from __future__ import annotations

import os

ADAPTER = "GPUENGINE_ADAPTER"  # "auto", "hardware", "software" or part of an adapter name
PRECISION = "GPUENGINE_PRECISION"  # "fp32" or "fp16"
OPTIMIZE = "GPUENGINE_OPTIMIZE"  # "0" turns graph passes and fusion off
TARGET = "GPUENGINE_TARGET"  # adapter class whose decompositions to use
HYBRID = "GPUENGINE_HYBRID"  # hybrid FULLY_CONNECTED arithmetic: "integer" or "float"
TUNE_CACHE = "GPUENGINE_TUNE_CACHE"  # path of the tuning cache
LATENCY_FIT = "GPUENGINE_LATENCY_FIT"  # path of the latency model's fits
MODELS = "GPUENGINE_MODELS"  # where `gpuengine fetch` keeps reference models
MEMPLAN_NODES = "GPUENGINE_MEMPLAN_NODES"  # node budget of the exact memory planner
MEMPLAN_BUDGET = "GPUENGINE_MEMPLAN_BUDGET"  # seconds per plan of the exact memory planner
DEVICE = "GPUENGINE_DEVICE"  # device profile: "full" (the adapter's features and limits) or "baseline"
WEBGPU = "GPUENGINE_WEBGPU"  # the WebGPU implementation: "wgpu" (wgpu-native, the default) or "dawn"

NAMES = (ADAPTER, PRECISION, OPTIMIZE, TARGET, HYBRID, TUNE_CACHE, LATENCY_FIT, MODELS, MEMPLAN_NODES, MEMPLAN_BUDGET,
         DEVICE, WEBGPU)


def get(name: str, default: str | None = None) -> str | None:
    """The value of one of NAMES, or `default` when it is unset (empty counts as set)."""
    if name not in NAMES:
        raise KeyError(f"{name} is not one of gpuengine's settings ({', '.join(NAMES)})")
    return os.environ.get(name, default)


def flag(name: str, default: bool) -> bool:
    """A yes/no setting: "0", "false", "no" and "off" are no, anything else yes."""
    value = get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")
