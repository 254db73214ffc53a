"""Lowering one GPU partition to its dispatches, without a GPU: kernel choice and fusion (fusion.lower), the
boundary converters, how each dispatch divides its work (`Choices`), alias roots, shared shaders, and what the
memory planner and reports need from the dispatches (usage records, launched invocations, MACs).

The GPU program (runtime/program.py) compiles what `partition_specs` returns; `planning.planned_dispatches`,
the render hash and the latency reports call it without a device.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import numpy as np

from ..errors import UnsupportedOpError
from ..latency import policy
from ..latency.defaults import default_workgroup
from ..latency.limits import BASELINE, DeviceLimits
from ..latency.target import Target
from ..model.ir import Graph
from ..model.ops import KV_CACHE_WRITE, KV_EPILOGUE
from . import codegen
from . import lasnet as lasnet_lowering
from .fusion import lower
from .kernels import convert, kv_epilogue, tiling
from .kernels.base import Binding, Decomposition, KernelSpec, Variants
from .kernels.common import holds_integers
from .kernels.kv_cache import writes
from .kernels.tuned import Tuned
from .layout import phwc4_elements, stored_as_bhwc
from .storage_precision import kept_f32, mark_exact, stores_tensor


def signature(spec: KernelSpec) -> str:
    """What a tuned workgroup size is keyed by: the template, its baked numbers, fused code and the grid."""
    params = ",".join(f"{k}={v}" for k, v in sorted(spec.params.items()))
    fused = hashlib.sha1("\n".join([*spec.epilogue, *spec.functions]).encode()).hexdigest()[:12]
    return f"{spec.shader}|{params}|{fused}|grid={spec.grid}"


class Choices:
    """How every dispatch of a device divides its work: the tuning cache's choice where it has one that this
    device can run, else the target's default (latency/policy.py) or the default workgroup size. limits: the
    device's (WebGPU's defaults when planning without one). split_writes: whether KV cache writes sharing a
    dispatch that would bind more than limits.storage_buffers become one dispatch each (lowering/fusion.py); a
    device's program always does, a report planned without a device for a full one (False) keeps them shared."""

    def __init__(self, target: Target, tuned: Tuned | None = None, limits: DeviceLimits = BASELINE,
                 split_writes: bool = True) -> None:
        self.target, self.tuned, self.limits = target, tuned or Tuned(), limits
        self.split_writes = split_writes
        self.max_invocations = limits.invocations
        self.from_cache = 0  # dispatches whose choice came from the tuning cache

    def decide(self, variants: Variants) -> Decomposition:
        tuned = self.tuned.decompositions.get(variants.problem)
        if tuned is not None and self.runs(variants, tuned):
            self.from_cache += 1
            return tuned
        # the adapter's fitted latency model where the target is the adapter's own class, else the class's
        fitted = self.tuned.latency if self.target.detected else None
        return policy.choose(variants, self.target, fitted)

    def runs(self, variants: Variants, d: Decomposition) -> bool:
        """Whether d is one of the kernel's decompositions (any tiles per workgroup) and fits this device."""
        offered = any((c.tile, c.split, c.subgroup) == (d.tile, d.split, d.subgroup) for c in variants.candidates)
        return (offered and (not d.subgroup or self.target.subgroups)
                and d.invocations_per_workgroup <= self.max_invocations
                and tiling.lane_memory_fits(d, d.tile[0] * d.tile[1] if d.split > 1 else 1))

    def workgroup(self, spec: KernelSpec) -> tuple[int, int, int]:
        tuned = self.tuned.workgroups.get(signature(spec))
        if tuned is not None and (tuned[0] * tuned[1] * tuned[2] > self.max_invocations
                                  or any(w > m for w, m in zip(tuned, self.limits.workgroup_size))):
            tuned = None  # tuned on a device with higher limits
        self.from_cache += tuned is not None
        return tuned or default_workgroup(spec.grid, self.max_invocations)


def partition_specs(graph: Graph, ops: list[int], inputs: list[int], outputs: list[int], optimize: bool,
                    choices: Choices, f32_names: frozenset[str] = frozenset(), sparse: list | None = None,
                    precision: str = "fp32",
                    ) -> tuple[list[KernelSpec], Callable[[int], int], list[bool], frozenset[int]]:
    """Every dispatch of a GPU partition in order, boundary converters included, decomposed and sized by
    `choices`; the alias-root function; which dispatches the tuner may change; and the tensors kept in f32 in an
    fp16 program (f32_names: mixed precision, kept_f32); precision: the program's (a boundary tensor stored in
    f32 is bound directly where its PHWC4 layout is its BHWC one, direct_boundaries). sparse: (MaskedBlock,
    patch, expected rate) of the LASNet blocks that run spatially sparse (lowering/lasnet.py)."""
    skipped = lasnet_lowering.block_ops(sparse) if sparse else set()
    specs, aliases = lower(graph, [i for i in ops if i not in skipped], outputs, fuse=optimize,
                           ready_before=set(inputs), decide=choices.decide,
                           max_bindings=choices.limits.storage_buffers, split_writes=choices.split_writes)

    def root(t: int) -> int:
        while t in aliases:
            t = aliases[t]
        return t

    if sparse:
        specs = lasnet_lowering.insert_blocks(specs, sparse, root)

    in_place = in_place_pairs(graph, ops, inputs, outputs)
    direct_in, direct_out = direct_boundaries(graph, specs, inputs, outputs, in_place, root, precision)
    specs = ([convert.to_phwc4(graph, t) for t in inputs if t not in in_place and t not in direct_in] + specs
             + [convert.from_phwc4(graph, t, root(t)) for t in outputs
                if t not in in_place.values() and t not in direct_out.values()])
    tunable = []
    for spec in specs:
        tunable.append(spec.workgroup is None or spec.variants is not None)
        finish(spec, root, choices)
    f32 = kept_f32(specs, graph, root, f32_names)
    # a dispatch writing a cache in place (f32) stores f32: what else it writes (a rotated query) is kept in f32
    f32 |= {root(b.tensor) for spec in specs if any(b.writable and b.tensor in in_place.values() for b in spec.bindings)
            for b in spec.bindings if b.writable and stores_tensor(b)}
    for spec in specs:
        mark_exact(spec, graph, f32)
        for b in spec.bindings:  # a cache written in place lives in its BHWC boundary buffer, as f32
            if b.tensor in in_place.values() and b.data is None:
                b.raw, b.exact = True, True
    bind_boundaries_directly(specs, direct_in, direct_out)
    share_shaders(specs, choices.limits.storage_buffers)
    return specs, root, tunable, f32


def share_shaders(specs: list[KernelSpec], max_bindings: int | None = None) -> None:
    """Dispatches whose WGSL differs only in baked constants (identical layers of a small model: each layer's norm
    weights or channel scales baked into its own shader) get those constants bound instead, as f32 buffers (the
    type of the literals they replace: the same arithmetic), so they compile one shader, not one per layer.
    A constant baked in one dispatch alone stays baked, and so do a group's whose dispatches would then bind more
    than `max_bindings` storage buffers (the device's limit)."""
    def skeleton(spec: KernelSpec) -> str:
        baked = [b for b in spec.bindings if codegen.is_baked(b)]
        for b in baked:
            b.bake = False
        try:
            return codegen.render(spec)
        finally:
            for b in baked:
                b.bake = True

    groups: dict[str, list[KernelSpec]] = {}
    for spec in specs:
        if any(codegen.is_baked(b) for b in spec.bindings):
            groups.setdefault(skeleton(spec), []).append(spec)
    for group in groups.values():
        if max_bindings is not None and any(len(spec.bindings) > max_bindings for spec in group):
            continue  # unbaked, every binding would be bound
        if len({codegen.render(spec) for spec in group}) > 1:
            for spec in group:
                for b in spec.bindings:
                    if codegen.is_baked(b):
                        b.bake, b.exact = False, True


def direct_boundaries(graph: Graph, specs: list[KernelSpec], inputs: list[int], outputs: list[int],
                      in_place: dict[int, int], root: Callable[[int], int], precision: str,
                      ) -> tuple[frozenset[int], dict[int, int]]:
    """The boundary tensors whose converter would copy bytes unchanged (layout.stored_as_bhwc): the dispatches read
    such an input from its boundary buffer, and write such an output's alias root into the output's boundary buffer
    (source -> output), with no converter dispatch. Only tensors stored in f32 (integers, or an fp32 program; f16
    storage is not the host's f32 bytes), of static shape (a symbolic plan's sizes would change the rule's answer),
    and not KV caches written in place. An output qualifies without padding lanes only (a producer writes whole
    vec4s: the padding of an input fed from it would not stay zero) and where its root is written by the
    partition, read and written by no one dispatch (WebGPU: no read-only and writable views of one buffer), and the
    root of no other output."""
    def stored_f32(t: int) -> bool:
        return holds_integers(graph.tensors[t]) or precision == "fp32"

    def static(t: int) -> bool:
        tensor = graph.tensors[t]
        return tensor.shape_signature is None or all(d >= 0 for d in tensor.shape_signature)

    written: set[int] = set()
    read_and_written: set[int] = set()
    for spec in specs:
        mine = {root(b.tensor) for b in spec.bindings if b.tensor is not None and b.writable}
        written |= mine
        read_and_written |= mine & {root(b.tensor) for b in spec.bindings if b.tensor is not None and not b.writable}
    direct_in = frozenset(t for t in inputs if t not in in_place and root(t) == t and t not in written
                          and static(t) and stored_f32(t) and stored_as_bhwc(graph.tensors[t].shape))
    roots = [root(t) for t in outputs]
    direct_out = {}
    for t, source in zip(outputs, roots):
        shape = graph.tensors[t].shape
        if (t in in_place.values() or t in inputs or source in inputs or roots.count(source) > 1
                or source not in written or source in read_and_written or not static(t) or not static(source)
                or not stored_f32(t) or holds_integers(graph.tensors[t]) != holds_integers(graph.tensors[source])
                or not stored_as_bhwc(shape, padded=False)
                or phwc4_elements(graph.tensors[source].shape) != phwc4_elements(shape)):
            continue
        direct_out[source] = t
    return direct_in, direct_out


def bind_boundaries_directly(specs: list[KernelSpec], direct_in: frozenset[int], direct_out: dict[int, int]) -> None:
    """The bindings of the inputs and output roots of direct_boundaries become bindings of their boundary buffers
    (raw, f32): read and written where the converters would have copied them (alias roots resolved already)."""
    for spec in specs:
        for b in spec.bindings:
            if b.raw or b.tensor is None or b.data is not None or b.scratch_bytes:
                continue
            if b.tensor in direct_in:
                b.raw, b.exact = True, True
            elif b.tensor in direct_out:
                b.tensor, b.raw, b.exact = direct_out[b.tensor], True, True


def in_place_pairs(graph: Graph, ops: list[int], inputs: list[int], outputs: list[int]) -> dict[int, int]:
    """Input -> output of the partition's KV_CACHE_WRITE ops (passes/kv_cache_in_place.py): the two share one BHWC
    buffer (the input's), which the write updates in place; neither is converted to or from PHWC4."""
    pairs = {}
    for i in ops:
        op = graph.ops[i]
        if op.opt(KV_EPILOGUE):  # a projection writing the caches in its store (kernels/kv_epilogue.py)
            op = kv_epilogue.split(op)[1]
        for write in writes(op) if op.code == KV_CACHE_WRITE else []:
            if write.code != KV_CACHE_WRITE:  # a rotated query written beside the caches
                continue
            cache, out = write.inputs[0], write.outputs[0]
            if cache not in inputs or out not in outputs:
                raise UnsupportedOpError(f"{KV_CACHE_WRITE}: cache {graph.tensors[cache].name!r} must be an "
                                         "input and its result an output of the GPU partition")
            pairs[cache] = out
    return pairs


def finish(spec: KernelSpec, root: Callable[[int], int], choices: Choices) -> None:
    """Tensor bindings read the alias roots; a spec without a workgroup gets the tuned or default one."""
    for b in spec.bindings:
        if b.tensor is not None and not b.raw:
            b.tensor = root(b.tensor)
    if spec.workgroup is None:
        spec.workgroup = choices.workgroup(spec)


def launched(spec: KernelSpec) -> int:
    """Invocations a dispatch launches (whole workgroups)."""
    return int(np.prod(codegen.dispatch_size(spec))) * int(np.prod(spec.workgroup))


def dispatch_macs(spec: KernelSpec, graph: Graph) -> int:
    """Multiply-accumulates of a dispatch; for kernels without them, the elements it reads: of a binding it reads in
    part, the part (Binding.touched: a gather's rows, not its whole table; a cache read in full, the worst case)."""
    if spec.macs:
        return spec.macs

    def read(b: Binding) -> int:
        elements = graph.tensors[b.tensor].size if b.tensor is not None else int(b.data.size)
        return elements if b.touched is None else math.ceil(elements * b.touched.fraction())

    return sum(read(b) for b in spec.bindings if not b.writable and (b.tensor is not None or b.data is not None))
