"""What lowering can run, and at what predicted cost: the questions fusion passes ask the kernels before they
rewrite a graph.

A pass only merges ops where a kernel accepts the result, so the op never lands where nothing could run it; a
fusion that trades a dispatch for recomputation weighs the latency model's prediction of both. Passes sit below
lowering and import none of it: the kernels package (lowering/kernels/__init__.py) installs the registry and the cost
here when any kernel module is first imported, which every engine entry point does before it runs passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..model.ir import Graph, Op


class KernelRegistry(Protocol):
    """What lowering/kernels/registry.py offers (it installs itself, the module)."""

    def check(self, op: Op, graph: Graph) -> str | None: ...

    def find(self, op: Op) -> Any: ...


_registry: KernelRegistry | None = None
_op_ns: Callable[..., tuple[float, int]] | None = None


def install(registry: KernelRegistry, op_ns: Callable[..., tuple[float, int]]) -> None:
    """Called by lowering/kernels/__init__.py with the registry module (`check`: why an op cannot run, None when it can;
    `find`: the kernel object of an op's code, None when no kernel claims it) and kernels/dispatch_cost.op_ns.
    The registry's functions are looked up at each call, so a test that patches registry.check patches what
    passes see too."""
    global _registry, _op_ns
    _registry, _op_ns = registry, op_ns


def _installed() -> KernelRegistry:
    if _registry is None:
        raise RuntimeError("no kernel registry installed: import gpuengine.lowering.kernels before running passes")
    return _registry


def check(op: Op, graph: Graph) -> str | None:
    """None when op runs on the GPU; otherwise why not."""
    return _installed().check(op, graph)


def expression_of(op: Op) -> Any:
    """(statements, helper functions) evaluating `op` inline, when its kernel offers that
    (lowering/kernels/prologue.py)."""
    as_expression = getattr(_installed().find(op), "as_expression", None)
    return as_expression(op) if as_expression is not None else None


def prologue_leaves_from(op: Op) -> int | None:
    """The input from which op's kernel takes the leaves of an input expression (None: it reads none)."""
    return getattr(_installed().find(op), "prologue_leaves_from", None)


def op_ns(op: Op, graph: Graph, device: Any) -> tuple[float, int]:
    """(Predicted ns, dispatches) of op lowered alone on the latency model's `device`
    (lowering/kernels/dispatch_cost.py)."""
    _installed()
    assert _op_ns is not None
    return _op_ns(op, graph, device)
