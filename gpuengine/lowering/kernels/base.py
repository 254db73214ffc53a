"""The kernel protocol: one op = one kernel module that checks support and emits dispatch specs.

A kernel never touches the GPU. `build` returns KernelSpecs: which WGSL template, which numbers to bake into
it, which tensors and prepared constant arrays to bind, and the grid. The runtime turns specs into pipelines.

Template contract (shaders/*.wgsl, filled by codegen.render):
  * Element types: tensors are stored as `S4` (vec4; `S1` for a scalar view, `SM` for mat4x4 weight blocks),
    which codegen's preamble makes f16 or f32 by the program's precision. Arithmetic is f32: every load from
    storage converts (`vec4<f32>(src[i])`) and every store converts back (`dst[oi] = D4(value)`), except the
    inner products of the conv family, FC and BATCH_MATMUL, which multiply in storage precision and accumulate
    in f32 (`acc += vec4<f32>(w * s)`).
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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...model.ir import Graph, Op


class Code(str):
    """WGSL text written by gpuengine itself. Only Code (never user strings) is pasted into shaders."""


@dataclass(frozen=True)
class Touched:
    """The part of a binding a dispatch touches, when it is not the whole (the latency model counts bytes as the
    kernel moves them: lowering/kernels/dispatch_cost.py): `rows` of the binding's `of` equal rows (a gather's
    rows of its table, the rows a KV-cache write stores). With `by_position`, the rows are the positions up to a
    decode step's position plus `rows` (a cache read up to the position): the prediction's position, or, where
    none is given, all `of` (a full cache: the worst case)."""

    rows: int
    of: int
    by_position: bool = False

    def fraction(self, position: int | None = None) -> float:
        rows = self.rows + (self.of if position is None else position) if self.by_position else self.rows
        return min(1.0, max(0, rows) / max(1, self.of))


@dataclass
class Binding:
    """One storage buffer of a dispatch: a graph tensor (PHWC4), a prepared constant, or scratch space."""

    name: str
    tensor: int | None = None
    data: np.ndarray | None = None  # prepared once at build time (e.g. re-laid-out weights), f32 or u32
    scratch_bytes: int = 0
    # scratch bindings of one program with the same non-empty key are one buffer: a kernel's first dispatch writes
    # what its second reads (ATTENTION's flash-decoding partials)
    scratch_key: str = ""
    writable: bool = False
    # WGSL element type of the array. The storage types follow the program's precision (codegen.preamble):
    # "S4" a PHWC4 vec4 (tensors, and constants that are tensor data), "S1" one scalar of PHWC4 storage, "SM" a
    # mat4x4 weight block; f16 in fp16 mode, f32 otherwise. Fixed types ("vec4<f32>", "f32", "u32") never change:
    # raw BHWC boundary buffers, index and interpolation tables.
    element: str = "S4"
    raw: bool = False  # a BHWC (not PHWC4) boundary buffer: only the layout converters use it
    shared: bool = False  # set by the runtime: another binding of this dispatch lives in the same buffer
    # set by the runtime (mark_exact): the binding is stored as f32 whatever the precision: it holds integers (an
    # int32 / bool tensor), a float tensor kept in f32 (mixed precision), or a constant of a dispatch computing in
    # f32 (codegen.dispatch_precision)
    exact: bool = False
    wide: bool = False  # set by the runtime: a float tensor kept in f32 (mixed precision): its readers compute in f32
    # cleared by the runtime (runtime/program.py share_shaders): a small constant bound (as f32) instead of baked, so
    # dispatches that differ only in it (identical layers) share one shader
    bake: bool = True
    touched: Touched | None = None  # the part the dispatch reads or writes, when not all of it (cost only)


@dataclass(frozen=True)
class Decomposition:
    """How a kernel divides its work among invocations; every decomposition a kernel offers is correct on every
    adapter, only its speed differs (latency/policy.py picks one per target, `gpuengine tune` per adapter).

    tile:     outputs per invocation, (pixels, rows or columns; output slices): one weight load feeds tile[0]
              outputs, one input load tile[1].
    split:    invocations sharing one tile's reduction (1: none). They combine partial results through workgroup
              memory, or subgroup shuffles when `subgroup` (the adapter's `subgroup` feature).
    group:    tiles per workgroup, so a workgroup has split * group invocations.
    wide:     packed weights read a vec4<u32> a load (4 int8 words, or 8 of int4 weights), the reduction's steps
              being those (kernels that offer it: hybrid FULLY_CONNECTED).
    staged:   the input row(s), shared by every tile of the dispatch, normalized and quantized once per workgroup
              into workgroup memory by all its invocations, the dot loop reading them from there (hybrid
              FULLY_CONNECTED in integer arithmetic when its rows fit one row tile).
    """

    tile: tuple[int, int] = (1, 1)
    split: int = 1
    group: int = 64
    subgroup: bool = False
    wide: bool = False
    staged: bool = False

    @property
    def invocations_per_workgroup(self) -> int:
        return self.split * self.group

    def describe(self) -> str:
        text = f"tile {self.tile[0]}x{self.tile[1]}"
        if self.split > 1:
            text += f", split {self.split} ({'subgroup' if self.subgroup else 'shared memory'})"
        if self.wide:
            text += ", vec4<u32> weights"
        if self.staged:
            text += ", row staged in workgroup memory"
        return text + f", workgroup {self.invocations_per_workgroup}"

    def to_json(self) -> dict[str, Any]:
        return {"tile": list(self.tile), "split": self.split, "group": self.group, "subgroup": self.subgroup,
                **({"wide": True} if self.wide else {}), **({"staged": True} if self.staged else {})}

    @staticmethod
    def from_json(data: Any) -> Decomposition | None:
        """The decomposition a tuning cache stored, or None when the entry is malformed."""
        try:
            tile = tuple(int(v) for v in data["tile"])
            result = Decomposition((tile[0], tile[1]), int(data["split"]), int(data["group"]),
                                   bool(data["subgroup"]), bool(data.get("wide", False)),
                                   bool(data.get("staged", False)))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None
        return result if min(*result.tile, result.split, result.group) >= 1 else None


@dataclass
class Variants:
    """A dispatch offered in several decompositions; the runtime resolves it to one KernelSpec.

    problem:     what the tuning cache keys the choice by: the template family and everything baked into the
                 kernel except the decomposition.
    candidates:  the decompositions to choose from, most work per invocation first.
    invocations: invocations a candidate launches, in whole workgroups (cheap: no weights are laid out).
    active:      of those, the ones that have a tile to work on.
    work:        estimated cost of one active invocation, in units of one scalar multiply-add
                 (kernels/tiling.py), for the policy's estimate of its time.
    make:        the KernelSpec of a candidate.
    macs:        multiply-accumulates of the dispatch (for ops without them: elements read).
    work_at:     work(d, position) of a kernel that reads only up to a decode step's position (None: `work`).
    barriers, shuffles: a kernel's own count of what one invocation passes (workgroup barriers) and does (vec4
                 subgroup shuffles) where it does not follow the split's reduction tree (None, or a callback
                 answering None: the tree's counts, latency.split_barriers / split_shuffles).
    template:    the template (KernelSpec.shader) a candidate runs, where candidates run different ones (None: all
                 the dispatch's), so a device's fitted efficiency of each prices its candidates.
    """

    problem: str
    candidates: list[Decomposition]
    invocations: Callable[[Decomposition], int]
    active: Callable[[Decomposition], int]
    work: Callable[[Decomposition], float]
    make: Callable[[Decomposition], KernelSpec]
    macs: int
    work_at: Callable[[Decomposition, int | None], float] | None = None
    barriers: Callable[[Decomposition], int | None] | None = None
    shuffles: Callable[[Decomposition], int | None] | None = None
    template: Callable[[Decomposition], str] | None = None

    def resolve(self, decomposition: Decomposition) -> KernelSpec:
        spec = self.make(decomposition)
        spec.variants, spec.decomposition, spec.macs = self, decomposition, self.macs
        return spec


@dataclass
class FusedOp:
    """One elementwise op fusion.py emitted into a spec's epilogue, kept so a re-decomposed spec gets it too."""

    op: int
    code: str
    source: int  # the tensor the producer wrote before (now consumed inside the epilogue)
    output: int  # the tensor the producer writes instead
    lines: list[Code]
    functions: list[Code]
    bindings: list[Binding]


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
    macs: int = 0  # multiply-accumulates (elements read for ops without them); 0: the runtime counts reads
    dispatch: tuple[int, int, int] | None = None  # workgroup counts, when the kernel lays out its own grid
    variants: Variants | None = None  # set when this spec is one decomposition of several
    decomposition: Decomposition | None = None
    fused: list[FusedOp] = field(default_factory=list)  # epilogue fusions applied to this spec, in order
    quantize: list[Code] = field(default_factory=list)  # rounding of its own output to a quantized grid
    # dispatched indirectly: the workgroup counts are read by the GPU from the scratch buffer of this key, which an
    # earlier dispatch writes (LASNet's active patches, kernels/lasnet.py); `dispatch` is then their upper bound
    indirect: str = ""

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


Lowering = list  # list[KernelSpec | Variants | Alias]


class BuildContext(Protocol):
    max_workgroup_invocations: int


class Kernel(Protocol):
    """A kernel module exposes an object with these members; kernels/registry.py maps op codes to them."""

    ops: tuple[str, ...]

    def supports(self, op: Op, graph: Graph) -> str | None:
        """None when the GPU can run this op exactly; otherwise the reason it cannot."""

    def build(self, op: Op, graph: Graph) -> Lowering:
        """Dispatch specs, decomposable dispatches (Variants) and aliases computing the op's outputs."""


class EpilogueKernel(Kernel, Protocol):
    """A kernel whose op can be fused into the epilogue of the kernel producing one of its inputs."""

    def as_epilogue(self, op: Op, graph: Graph, position: int, prefix: str) -> Epilogue | None:
        """Code applying the op to `value` (the producer's output for input `position`), or None."""


@dataclass
class Epilogue:
    lines: list[Code]
    functions: list[Code]
    bindings: list[Binding]


def finishing_each(items: list, finish: Callable[[KernelSpec], KernelSpec]) -> list:
    """A kernel's build items with `finish` applied to every spec they give: a KernelSpec at once, a Variants' to
    the spec each decomposition makes (chosen later); other items (aliases) as they are."""
    out = []
    for item in items:
        if isinstance(item, Variants):
            item = dataclasses.replace(item, make=lambda d, make=item.make: finish(make(d)))
        elif isinstance(item, KernelSpec):
            item = finish(item)
        out.append(item)
    return out
