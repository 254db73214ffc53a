"""Asks the kernel registry whether each op can run on the GPU, and records why not."""

from __future__ import annotations

from gpuengine.kernels import registry
from gpuengine.model.ir import Graph


def gpu_support(graph: Graph) -> dict[int, str | None]:
    """op index -> None (runs on the GPU) or the reason it cannot."""
    result: dict[int, str | None] = {}
    for i, op in enumerate(graph.ops):
        dynamic = [graph.tensors[t].name for t in [*op.inputs, *op.outputs]
                   if t >= 0 and graph.tensors[t].data is None and any(d < 0 for d in graph.tensors[t].shape)]
        result[i] = f"dynamic shape in {dynamic}" if dynamic else registry.check(op, graph)
    return result


def unsupported_summary(graph: Graph, support: dict[int, str | None]) -> dict[str, str]:
    """{op name: first reason} for the ops that stay on the CPU."""
    out: dict[str, str] = {}
    for i, reason in support.items():
        if reason is not None:
            out.setdefault(graph.ops[i].code, reason)
    return out
