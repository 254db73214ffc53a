"""What lowering can run: the one question fusion passes ask the kernels before they rewrite a graph.

A pass only merges ops where a kernel accepts the result, so the op never lands where nothing could run it. Passes
sit below lowering and import none of it: the kernel registry (kernels/registry.py) installs its answers here when
it is imported, which every engine entry point does before it runs passes.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..model.ir import Graph, Op


class KernelRegistry(Protocol):
    """What kernels/registry.py offers (it installs itself, the module)."""

    def check(self, op: Op, graph: Graph) -> str | None: ...

    def find(self, op: Op) -> Any: ...


_registry: KernelRegistry | None = None


def install(registry: KernelRegistry) -> None:
    """Called by kernels/registry.py with itself: `check` says why an op cannot run (None: it can), `find` gives
    the kernel object of an op's code (None: no kernel claims it). Looked up at each call, so a test that patches
    the registry's check patches what passes see too."""
    global _registry
    _registry = registry


def _installed() -> KernelRegistry:
    if _registry is None:
        raise RuntimeError("no kernel registry installed: import gpuengine.kernels.registry before running passes")
    return _registry


def check(op: Op, graph: Graph) -> str | None:
    """None when op runs on the GPU; otherwise why not."""
    return _installed().check(op, graph)


def expression_of(op: Op) -> Any:
    """(statements, helper functions) evaluating `op` inline, when its kernel offers that (kernels/prologue.py)."""
    as_expression = getattr(_installed().find(op), "as_expression", None)
    return as_expression(op) if as_expression is not None else None


def prologue_leaves_from(op: Op) -> int | None:
    """The input from which op's kernel takes the leaves of an input expression (None: it reads none)."""
    return getattr(_installed().find(op), "prologue_leaves_from", None)
