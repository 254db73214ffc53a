"""Asks the kernel registry whether each op can run on the GPU, and records why not."""

from __future__ import annotations

import numpy as np

from gpuengine.lowering.kernels import registry
from gpuengine.model.ir import Graph


def gpu_support(graph: Graph) -> dict[int, str | None]:
    """op index -> None (runs on the GPU) or the reason it cannot."""
    result: dict[int, str | None] = {}
    for i, op in enumerate(graph.ops):
        tensors = [graph.tensors[t] for t in [*op.inputs, *op.outputs] if t >= 0]
        computed = [t for t in tensors if t.data is None]
        dynamic = [t.name for t in computed if any(d < 0 for d in t.shape)]
        # A GPU buffer cannot be empty (wgpu refuses zero-byte writes and bindings); LiteRT runs empty tensors.
        empty = [t.name for t in computed if 0 in t.shape]
        # Kernels index PHWC4 storage with 32-bit integers and bake sizes as i32/u32 literals (WGSL refuses a
        # literal it cannot represent): a tensor of 2 GiB or more stays on the CPU.
        huge = [t.name for t in tensors if not dynamic and phwc4_bytes(t.shape) >= MAX_GPU_TENSOR_BYTES]
        if dynamic:
            result[i] = f"dynamic shape in {dynamic}"
        elif empty:
            result[i] = f"empty tensor (a dimension of 0) in {empty}"
        elif huge:
            result[i] = f"tensor of 2 GiB or more in {huge} (GPU kernels index with 32-bit integers)"
        else:
            result[i] = registry.check(op, graph)
    return result


MAX_GPU_TENSOR_BYTES = 1 << 31


def phwc4_bytes(shape: tuple[int, ...]) -> int:
    """Bytes of a float32 tensor in PHWC4 storage (its last axis padded to 4 channels), without overflow."""
    if not shape:
        return 16
    return int(np.prod([int(d) for d in shape[:-1]], dtype=np.float64) * (-(-int(shape[-1]) // 4) * 4) * 4)


def unsupported_summary(graph: Graph, support: dict[int, str | None]) -> dict[str, str]:
    """{op name: first reason} for the ops that stay on the CPU."""
    out: dict[str, str] = {}
    for i, reason in support.items():
        if reason is not None:
            out.setdefault(graph.ops[i].code, reason)
    return out
