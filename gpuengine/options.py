"""Engine options: what they are (EngineOptions) and the one place they are parsed and checked
(`engine_options`: an Interpreter's keyword options, with the environment's defaults from settings.py).

Below planning and the runtime, which read the options, and above what the checks need (codegen's precisions,
the memory strategies, the hybrid arithmetics, the target classes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import settings
from .latency.limits import check_profile
from .latency.target import check as check_target
from .lowering.codegen import IMPLEMENTATIONS, PRECISIONS
from .memory import STRATEGIES
from .model.ir import Graph
from .passes.hybrid_arithmetic import ARITHMETICS as HYBRID_ARITHMETICS


@dataclass
class EngineOptions:
    """Engine extras, passed as Interpreter keyword options."""

    adapter: str | None = None
    precision: str = "fp32"  # "fp16": tensors and weights stored as f16 where the adapter has shader-f16
    f32_tensors: frozenset[str] = frozenset()  # fp16 only: tensors (by name) kept in f32 (mixed precision)
    # hybrid FULLY_CONNECTED (float activations, int8 weights): "integer" as LiteRT (rows quantized, i32 sums) or
    # "float" (weights dequantized in registers, f32 sums); passes/hybrid_arithmetic.py
    hybrid_arithmetic: str = "integer"
    memory_strategy: str = "best"
    workgroup_cache: str | None = None  # path of a tuning cache; None: the default location
    optimize: bool = True  # graph transformations and fusion
    target: str | None = None  # adapter class whose decompositions to use; None: env GPUENGINE_TARGET, else detected
    device: Any = None  # a wgpu.GPUDevice to run on (shared with other interpreters); None: the adapter's device
    # the device gpuengine opens: "full" (every optional feature it uses, the adapter's limits) or "baseline" (no
    # optional feature, WebGPU's default limits: latency/limits.py); env GPUENGINE_DEVICE
    device_profile: str = "full"
    max_inflight: int = 2  # invokes submitted and not yet read back, each with a staging buffer of its own
    # the latency model's description (tuning/latency.Device) of the device plans are for, which fusions trading a
    # dispatch for recomputation ask; None: the built-in one of `target`'s class (planning.planning_device)
    latency_device: Any = None
    # LASNet-style masked blocks (passes/lasnet_blocks.py): the activation rate expected of their masks; when set,
    # a block runs spatially sparse (runtime/sparse_block.py) at the patch size the latency model predicts fastest
    # for that rate, or dense where it predicts dense no slower (latency/sparse.py). None: every block runs dense.
    sparse_blocks: float | None = None
    # the WebGPU implementation (runtime/webgpu.py): "wgpu" (wgpu-py on wgpu-native) or "dawn" (wgpudawn on Dawn)
    webgpu: str = "wgpu"



def engine_options(*, adapter: str | None = None, precision: str | None = None,
                   memory_strategy: str = "best", workgroup_cache: str | None = None, optimize: bool | None = None,
                   target: str | None = None, device: Any = None, max_inflight: int = 2,
                   hybrid_arithmetic: str | None = None, device_profile: str | None = None,
                   sparse_blocks: float | None = None, webgpu: str | None = None) -> EngineOptions:
    """An Interpreter's engine options checked (ValueError naming the bad one, before any work) with the
    environment's defaults where an option is not given. f32_tensors names tensors of a model: f32_tensor_names
    resolves them once the model is read."""
    precision = (precision or settings.get(settings.PRECISION) or "fp32").strip().lower()
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)} "
                         "(argument or env GPUENGINE_PRECISION)")
    hybrid_arithmetic = (hybrid_arithmetic or settings.get(settings.HYBRID) or "integer").strip().lower()
    if hybrid_arithmetic not in HYBRID_ARITHMETICS:
        raise ValueError(f"hybrid_arithmetic {hybrid_arithmetic!r} is not one of {', '.join(HYBRID_ARITHMETICS)} "
                         "(argument or env GPUENGINE_HYBRID)")
    webgpu = (webgpu or settings.get(settings.WEBGPU) or "wgpu").strip().lower()
    if webgpu not in IMPLEMENTATIONS:
        raise ValueError(f"webgpu {webgpu!r} is not one of {', '.join(IMPLEMENTATIONS)} "
                         "(argument or env GPUENGINE_WEBGPU)")
    if memory_strategy not in STRATEGIES:
        raise ValueError(f"memory_strategy {memory_strategy!r} is not one of {', '.join(STRATEGIES)}")
    target = check_target(target)  # ValueError for an unknown class, before any work
    if isinstance(max_inflight, bool) or not isinstance(max_inflight, int) or max_inflight < 1:
        raise ValueError(f"max_inflight must be an integer >= 1, got {max_inflight!r}")
    if device is not None and not hasattr(device, "queue"):
        raise ValueError(f"device must be a wgpu.GPUDevice (gpuengine.get_device()), got {type(device).__name__}")
    if device is not None and device_profile is not None:
        raise ValueError("device_profile chooses the device gpuengine opens; a device passed in runs with its own "
                         "features and limits (open one with gpuengine.get_device(profile=...))")
    device_profile = check_profile(device_profile)  # ValueError naming the argument or GPUENGINE_DEVICE
    if sparse_blocks is not None and (isinstance(sparse_blocks, bool) or not isinstance(sparse_blocks, (int, float))
                                      or not 0.0 <= float(sparse_blocks) <= 1.0):
        raise ValueError(f"sparse_blocks must be an activation rate between 0 and 1 (or None), got {sparse_blocks!r}")
    if optimize is None:  # GPUENGINE_OPTIMIZE=0 turns passes and fusion off everywhere
        optimize = settings.flag(settings.OPTIMIZE, True)
    return EngineOptions(adapter=adapter, precision=precision, memory_strategy=memory_strategy,
                         workgroup_cache=workgroup_cache, optimize=optimize, target=target, device=device,
                         max_inflight=max_inflight, hybrid_arithmetic=hybrid_arithmetic, device_profile=device_profile,
                         sparse_blocks=None if sparse_blocks is None else float(sparse_blocks), webgpu=webgpu)


def f32_tensor_names(graph: Graph, spec: str | os.PathLike | Iterable[str | int] | None) -> frozenset[str]:
    """The Interpreter option as tensor names: a JSON file written by `search` (or holding a list), or tensor names
    and indices of the model's main graph. Unknown names and indices raise ValueError."""
    if spec is None:
        return frozenset()
    if isinstance(spec, (str, os.PathLike)):
        try:
            with open(spec) as f:
                loaded = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"f32_tensors: cannot read {str(spec)!r} as JSON ({e})") from None
        spec = loaded.get("f32_tensors") if isinstance(loaded, dict) else loaded
        if not isinstance(spec, list):
            raise ValueError("f32_tensors: the file holds neither a list nor a search result's 'f32_tensors' list")
    names = {t.name for t in graph.tensors}
    out = set()
    for item in spec:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not 0 <= int(item) < len(graph.tensors):
                raise ValueError(f"f32_tensors: tensor index {int(item)} is out of range (0..{len(graph.tensors) - 1})")
            out.add(graph.tensors[int(item)].name)
        elif isinstance(item, str):
            if item not in names:
                raise ValueError(f"f32_tensors: the model has no tensor named {item!r}")
            out.add(item)
        else:
            raise ValueError(f"f32_tensors takes tensor names or indices, got {type(item).__name__}")
    return frozenset(out)
