"""BHWC <-> PHWC4 converters, dispatched only at GPU partition boundaries (not ops: no registry entry)."""

from __future__ import annotations

from ...model.ir import Graph
from ..layout import slices, to_bhwc
from .base import Binding, KernelSpec

CONVERTERS = ("bhwc_to_phwc4", "phwc4_to_bhwc")  # their shaders


def _params(graph: Graph, t: int) -> tuple[dict, tuple[int, int, int]]:
    b, h, w, c = to_bhwc(graph.tensors[t].shape)
    s = slices(c)
    return {"H": h, "W": w, "C": c, "S": s}, (w, h, b * s)


def to_phwc4(graph: Graph, t: int) -> KernelSpec:
    params, grid = _params(graph, t)
    return KernelSpec("bhwc_to_phwc4", params, [Binding("src", tensor=t, raw=True, element="f32"),
                                                Binding("dst", tensor=t, writable=True)],
                      grid, out_channels=params["C"], label=f"input {graph.tensors[t].name} -> PHWC4")


def from_phwc4(graph: Graph, t: int, source: int) -> KernelSpec:
    params, grid = _params(graph, t)
    return KernelSpec("phwc4_to_bhwc", params, [Binding("src", tensor=source),
                                                Binding("dst", tensor=t, raw=True, writable=True, element="f32")],
                      grid, label=f"PHWC4 -> output {graph.tensors[t].name}")
