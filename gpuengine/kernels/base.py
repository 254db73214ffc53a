"""The kernel protocol: one op = one kernel module that checks support and emits dispatch specs.

A kernel never touches the GPU. `build` returns KernelSpecs: which WGSL template, which numbers to bake into
it, which tensors and prepared constant arrays to bind, and the grid. The runtime turns specs into pipelines.

Template contract (shaders/*.wgsl, filled by codegen.render):
  * `${BINDINGS}` is replaced by the storage declarations of `spec.bindings`, in order (binding i = index i).
  * `${WG_X}`, `${WG_Y}`, `${WG_Z}` are the workgroup size; `${GRID_X}`.. the logical grid, to bounds-check.
  * Every other `${NAME}` comes from `spec.params` (numbers become WGSL literals; `Code` is inserted as is).
  * Kernels that write one PHWC4 output vec4 per invocation name it `value` and call `${EPILOGUE}` before the
    store with `ob, oy, ox, os` (batch, row, column, slice) and `oi` (linear vec4 index) in scope: fused
    activations, fused elementwise ops and zeroing of padding lanes are emitted there. Kernels writing several
    vec4s per invocation bake SO (output slices), OH, OW and use `${STORE_FN}`: a shared
    `store(v, ob, oy, ox, os)` that bounds-checks, applies the epilogue and writes `dst`. Placeholders are
    substituted everywhere, comments included: never write a placeholder's name in a template comment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..model.ir import Graph, Op


class Code(str):
    """WGSL text written by gpuengine itself. Only Code (never user strings) is pasted into shaders."""


@dataclass
class Binding:
    """One storage buffer of a dispatch: a graph tensor (PHWC4), a prepared constant, or scratch space."""

    name: str
    tensor: int | None = None
    data: np.ndarray | None = None  # prepared once at build time (e.g. re-laid-out weights), f32 or u32
    scratch_bytes: int = 0
    writable: bool = False
    element: str = "vec4<f32>"  # WGSL element type of the array
    raw: bool = False  # a BHWC (not PHWC4) boundary buffer: only the layout converters use it
    shared: bool = False  # set by the runtime: another binding of this dispatch lives in the same buffer


@dataclass
class KernelSpec:
    """One dispatch: template name, baked parameters, bindings and the logical grid of invocations."""

    shader: str
    params: dict[str, int | float | bool | Code]
    bindings: list[Binding]
    grid: tuple[int, int, int]
    workgroup: tuple[int, int, int] | None = None  # None: the runtime picks (tuned cache, else heuristic)
    label: str = ""
    epilogue: list[Code] = field(default_factory=list)
    out_channels: int = 0  # channels of the PHWC4 output, for masking padding lanes in the epilogue
    ops: list[int] = field(default_factory=list)  # graph op indices this dispatch implements
    functions: list[Code] = field(default_factory=list)  # extra WGSL functions (fused operand readers)

    @property
    def output_tensor(self) -> int | None:
        for b in self.bindings:
            if b.writable and b.tensor is not None:
                return b.tensor
        return None


@dataclass
class Alias:
    """The op's output shares its input's storage (e.g. a RESHAPE that keeps the PHWC4 bytes identical)."""

    output: int
    source: int


Lowering = list  # list[KernelSpec | Alias]


class BuildContext(Protocol):
    max_workgroup_invocations: int


class Kernel(Protocol):
    """A kernel module exposes an object with these members; kernels/registry.py maps op codes to them."""

    ops: tuple[str, ...]

    def supports(self, op: Op, graph: Graph) -> str | None:
        """None when the GPU can run this op exactly; otherwise the reason it cannot."""

    def build(self, op: Op, graph: Graph) -> Lowering:
        """Dispatch specs (and aliases) that compute the op's outputs from its inputs."""


class EpilogueKernel(Kernel, Protocol):
    """A kernel whose op can be fused into the epilogue of the kernel producing one of its inputs."""

    def as_epilogue(self, op: Op, graph: Graph, position: int, prefix: str) -> Epilogue | None:
        """Code applying the op to `value` (the producer's output for input `position`), or None."""


@dataclass
class Epilogue:
    lines: list[Code]
    functions: list[Code]
    bindings: list[Binding]
