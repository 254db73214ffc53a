"""The fixed, documented order of graph transformations. Each pass is a pure Graph -> Graph function."""

from __future__ import annotations

from collections.abc import Callable

from ..model.ir import Graph
from .fold_constants import fold_constants

# Always applied: load-time work that no kernel should ever see.
REQUIRED: list[Callable[[Graph], Graph]] = [fold_constants]
# Applied when optimize=True (the default); the switch exists to check that they change no result.
OPTIONAL: list[Callable[[Graph], Graph]] = []


def run_passes(graph: Graph, optimize: bool = True) -> Graph:
    for p in REQUIRED + (OPTIONAL if optimize else []):
        graph = p(graph)
    return graph
