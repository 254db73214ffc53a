"""Mixed precision in an fp16 program: which stored tensors stay f32 (EngineOptions.f32_tensors, and what a
dispatch writing one must store with it), and which bindings hold exact values (integers, f32-kept tensors, the
constants of a dispatch that computes in f32). Decided per partition while lowering (dispatches.py); the
offline search that picks the names is mixed_precision.py.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model.ir import Graph
from . import codegen
from .kernels.base import Binding, KernelSpec
from .kernels.common import holds_integers


def mark_exact(spec: KernelSpec, graph: Graph, f32: frozenset[int] = frozenset()) -> None:
    """Bindings of int32 / bool tensors hold integers, stored f32 whatever the precision, and so are the float
    tensors of `f32` (kept_f32: mixed precision; `wide`, so their readers compute in f32 too); so are the constants
    of a dispatch computing in f32 (codegen.dispatch_precision)."""
    for b in spec.bindings:
        integers = b.tensor is not None and holds_integers(graph.tensors[b.tensor])
        b.wide = b.tensor is not None and not integers and b.tensor in f32
        b.exact = integers or b.wide
    if codegen.dispatch_precision(spec, "fp16") == "fp32":
        for b in spec.bindings:
            if b.data is not None and b.element in codegen.STORAGE_TYPES:
                b.exact = True


def stores_tensor(b: Binding) -> bool:
    """The binding is a PHWC4 tensor of the partition's memory plan (not a constant, scratch or raw boundary buffer)."""
    return b.tensor is not None and b.data is None and not b.raw and not b.scratch_bytes


def kept_f32(specs: list[KernelSpec], graph: Graph, root: Callable[[int], int],
             names: frozenset[str]) -> frozenset[int]:
    """The stored tensors (alias roots) that mixed precision keeps in f32: those named, and every tensor written
    by a dispatch that writes one of them (a dispatch's stores have one storage type)."""
    if not names:
        return frozenset()
    keep = {root(t.index) for t in graph.tensors if t.name in names}
    changed = True
    while changed:
        changed = False
        for spec in specs:
            written = {b.tensor for b in spec.bindings
                       if b.writable and stores_tensor(b) and not holds_integers(graph.tensors[b.tensor])}
            if written & keep and not written <= keep:
                keep |= written
                changed = True
    return frozenset(keep)

