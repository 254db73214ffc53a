"""Op code -> kernel: the one place that knows which kernel modules exist.

A new op touches three places: its kernel module (which lists the op codes it handles), its shader, and the
module's name in KERNEL_MODULES below.
"""

from __future__ import annotations

import functools
import importlib

from ...model.ir import Graph, Op
from .base import Kernel

KERNEL_MODULES = (
    "elementwise",
    "conv2d",
    "depthwise_conv2d",
    "transpose_conv",
    "fully_connected",
    "reshape",
    "transpose",
    "concat",
    "split",
    "slice",
    "tile",
    "gather",
    "dynamic_index",
    "pooling",
    "reduce",
    "softmax",
    "normalization",
    "attention",
    "kv_cache",
    "rope",
    "mediapipe_pooling",
    "select",
    "pad",
    "resize",
    "space_depth",
    "space_batch",
    "quantize",
    "mediapipe_landmarks",
)


@functools.cache
def _table() -> dict[str, Kernel]:
    table: dict[str, Kernel] = {}
    for name in KERNEL_MODULES:
        kernel = importlib.import_module(f"{__package__}.{name}").KERNEL
        for code in kernel.ops:
            if code in table:
                raise RuntimeError(f"op {code} is claimed by two kernel modules")
            table[code] = kernel
    return table


def supported_ops() -> list[str]:
    """The op codes a model may contain that run on the GPU (not the internal ones passes create)."""
    internal = {code for kernel in _table().values() for code in getattr(kernel, "internal_ops", ())}
    return sorted(set(_table()) - internal)


def kernel_for_code(code: str) -> Kernel:
    return _table()[code]


def find(op: Op) -> Kernel | None:
    """The kernel for op's code, or None when no kernel module claims it."""
    return _table().get(op.code)


def kernel_for(op: Op) -> Kernel:
    kernel = find(op)
    if kernel is None:
        raise KeyError(op.code)
    return kernel


def check(op: Op, graph: Graph) -> str | None:
    """None when the op runs on the GPU; otherwise why not."""
    kernel = find(op)
    if kernel is None:
        return f"no GPU kernel for {'custom op' if op.is_custom else 'op'} {op.code}"
    try:
        return kernel.supports(op, graph)
    except Exception as e:  # noqa: BLE001 - a support check must never take the process down
        return f"support check failed: {type(e).__name__}: {e}"
