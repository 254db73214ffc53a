"""What lowering can run: the one question fusion passes ask the kernels before they rewrite a graph.

A pass only merges ops where a kernel accepts the result, so the op never lands where nothing could run it. Passes
sit below lowering and import none of it: the kernel registry (kernels/registry.py) installs its answers here when
it is imported, which every engine entry point does before it runs passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model.ir import Graph, Op

_check: Callable[[Op, Graph], str | None] | None = None
_find: Callable[[Op], Any] | None = None


def install(check_op: Callable[[Op, Graph], str | None], find_kernel: Callable[[Op], Any]) -> None:
    """Called by kernels/registry.py: `check_op` says why an op cannot run (None: it can), `find_kernel` gives
    the kernel object of an op's code (None: no kernel claims it)."""
    global _check, _find
    _check, _find = check_op, find_kernel


def _installed() -> tuple[Callable[[Op, Graph], str | None], Callable[[Op], Any]]:
    if _check is None or _find is None:
        raise RuntimeError("no kernel registry installed: import gpuengine.kernels.registry before running passes")
    return _check, _find


def check(op: Op, graph: Graph) -> str | None:
    """None when op runs on the GPU; otherwise why not."""
    return _installed()[0](op, graph)


def expression_of(op: Op) -> Any:
    """(statements, helper functions) evaluating `op` inline, when its kernel offers that (kernels/prologue.py)."""
    as_expression = getattr(_installed()[1](op), "as_expression", None)
    return as_expression(op) if as_expression is not None else None


def prologue_leaves_from(op: Op) -> int | None:
    """The input from which op's kernel takes the leaves of an input expression (None: it reads none)."""
    return getattr(_installed()[1](op), "prologue_leaves_from", None)
