"""One GPU partition compiled once: pipelines, buffers per memory plan, bind groups; then a short hot loop.

Everything is built in the constructor (called from allocate_tensors), including the first invoke's command
buffer. `run` writes the inputs, submits the command buffer recorded in advance, records the next invoke's
while the GPU works on this one, waits, and reads back through one persistent staging buffer: the host's
critical path is the upload, one submit and the readback. Recording goes through wgpu-native's C functions
where the wgpu package exposes them (half the Python cost of its wrapper per dispatch).
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GpuEngineError, UnsupportedOpError
from ..latency.target import Target
from ..lowering import codegen
from ..lowering.device_fit import stored_data, violations
from ..lowering.dispatches import (
    Choices,
    bind_boundaries_directly,
    dispatch_macs,
    finish,
    in_place_pairs,
    launched,
    partition_specs,
    signature,
)
from ..lowering.fusion import redecompose
from ..lowering.kernels.base import Binding, Decomposition, KernelSpec
from ..lowering.kernels.common import EXACT_LIMIT, holds_integers
from ..lowering.kernels.convert import CONVERTERS
from ..lowering.kernels.dispatch_cost import binding_bytes
from ..lowering.kernels.tuned import Tuned
from ..lowering.layout import phwc4_elements
from ..lowering.parametric import unbaked
from ..lowering.storage_precision import mark_exact, stores_tensor
from ..memory import MemoryPlan, UsageRecord, plan_memory
from ..model.ir import Graph
from ..model.quantization import QUANTIZED_TYPES, dequantize, is_quantized
from ..options import EngineOptions
from .device import DEVICE_LOST, GpuDevice, WorkDone
from .webgpu import NAMES, buffer_with_data


@dataclass
class Dispatch:
    spec: KernelSpec
    pipeline: Any
    bind_group: Any
    groups: tuple[int, int, int]
    source: str


@dataclass(frozen=True)
class Indirect:
    """A dispatch's workgroup counts, read by the GPU from `buffer` at `offset` (KernelSpec.indirect: what an
    earlier dispatch of the same pass wrote there), in place of a hot dispatch's x count (y and z then unused)."""

    buffer: Any
    offset: int = 0


def record_dispatch(compute: Any, x: Any, y: int, z: int) -> None:
    """Record one dispatch of a hot entry into a compute pass: direct, or indirect when x is an Indirect."""
    if isinstance(x, Indirect):
        compute.dispatch_workgroups_indirect(x.buffer, x.offset)
    else:
        compute.dispatch_workgroups(x, y, z)


@dataclass
class Phases:
    """Seconds the last `run` spent in each phase (profile's host figures)."""

    upload: float = 0.0  # writing the inputs to the GPU
    submit: float = 0.0  # handing the recorded command buffer to the queue
    record_next: float = 0.0  # recording the next invoke's command buffer, while the GPU runs this one
    wait: float = 0.0  # blocked until the GPU is done and the results are mapped
    readback: float = 0.0  # copying the outputs out of the mapped staging buffer


@dataclass
class Submitted:
    """An invoke submitted to the GPU (GpuProgram.submit); GpuProgram.collect turns it into outputs."""

    slot: Slot | None  # None: its outputs stay on the GPU
    results: dict[int, np.ndarray] | None = None
    work: WorkDone | None = None  # set when the caller wants to know, without blocking, that the GPU is done
    times: tuple[float, float, float] = (0.0, 0.0, 0.0)  # upload, submit, recording the next (seconds)
    readback: frozenset[int] | None = None  # the outputs it copies back (None: all)


@dataclass
class Slot:
    """One invoke's way back to the host: a staging buffer, the command buffer submitted last (released when
    the slot is next submitted) and the job it belongs to."""

    staging: Any
    in_flight: Any = None
    job: Submitted | None = None


def _orphan_recorded(gpu: GpuDevice, recorded: dict[str, Any]) -> None:
    """Run when a program is collected: hand the command buffers it recorded in advance to the device, which
    submits them at its next safe point (GpuDevice.submit_orphans). wgpu-native leaks a finished command buffer
    that is never submitted (about 100 KiB each on lavapipe: RSS grew 16 MiB per 100 interpreters); a submitted
    one is freed once the GPU is done. Not submitted here: a finalizer may run in any thread, inside any wgpu
    call."""
    gpu.orphans.extend(c for c in recorded.values() if c is not None)
    recorded.clear()


class BoundBuffers:
    """A program's bind groups with some boundary tensors held in a caller's buffers instead of the program's own
    (GpuProgram.bind_buffers): a language-model session's KV cache, token and position. Made once, when the caller
    allocates its buffers (create_bind_group costs tens of microseconds: never per invoke); only the dispatches
    that bind a replaced tensor get bind groups of their own, the others share the program's. Submitted with
    GpuProgram.submit(bindings=...), which records the invoke with them: nothing is copied or bound per invoke."""

    def __init__(self, program: GpuProgram, buffers: dict[int, Any]) -> None:
        self.program = program
        self.buffers = dict(buffers)  # tensor index -> the caller's buffer
        self.version = -1  # the program's binding_version they were made for
        self.hot: list[tuple[Any, Any, int, int, int]] = []  # (pipeline, bind group, workgroups) per dispatch
        self.record: Any = None  # records the dispatches into a compute pass (GpuProgram._recorder)


@dataclass
class CompiledInfo:
    specs: list[KernelSpec] = field(default_factory=list)
    records: list[UsageRecord] = field(default_factory=list)
    plan: MemoryPlan | None = None
    compile_ms: float = 0.0


def usage_records(specs: list[KernelSpec], graph: Graph, root: Any, scalar_bytes: int = 4,
                  f32: frozenset[int] = frozenset()) -> list[UsageRecord]:
    """First/last dispatch and bytes of every PHWC4 tensor the partition keeps on the GPU (raw boundary buffers
    excluded); scalar_bytes: 2 when tensors are stored as f16; f32: tensors stored as f32 whatever the precision
    (kept_f32; integer tensors always are)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, spec in enumerate(specs):
        for b in spec.bindings:
            if b.tensor is None or b.raw:
                continue
            t = root(b.tensor)
            first.setdefault(t, step)
            last[t] = step
    return [UsageRecord(tensor=t, first=first[t], last=last[t], size=phwc4_elements(graph.tensors[t].shape)
                        * (4 if holds_integers(graph.tensors[t]) or t in f32 else scalar_bytes))
            for t in sorted(first)]


def host_value(value: np.ndarray, tensor: Any) -> np.ndarray:
    """A host value of a GPU partition's input as the f32 the GPU holds: integers must be exact in f32."""
    if holds_integers(tensor) and tensor.dtype != np.bool_ and value.size:
        big = np.abs(np.asarray(value, np.int64)).max()
        if big >= EXACT_LIMIT:
            raise ValueError(f"input {tensor.name!r} holds {int(big)}: int32 tensors on the GPU are held as exact f32 "
                             f"values, |x| < 2^24 ({EXACT_LIMIT})")
    return np.ascontiguousarray(value, dtype=np.float32)


def typed(value: np.ndarray, tensor: Any) -> np.ndarray:
    """An f32 result as the tensor's dtype: int32 exactly (the values are integers), bool as value != 0."""
    if tensor.dtype == np.bool_:
        return value != 0
    return np.rint(value).astype(tensor.dtype)


def quantized(real: np.ndarray, tensor: Any) -> np.ndarray:
    """Real values (already on the tensor's grid, lowering/kernels/common.py fake_quant) -> its integers."""
    scale, zero = float(tensor.quantization.scale[0]), float(tensor.quantization.zero_point[0])
    r = real.astype(np.float64) / scale
    lo, hi = QUANTIZED_TYPES[tensor.dtype]
    return np.clip(np.sign(r) * np.floor(np.abs(r) + 0.5) + zero, lo, hi).astype(tensor.dtype)


_CONSTANTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # wgpu device -> {digest: buffer}
SHARED_CONSTANT_BYTES = 1024  # constants at least this large are shared by content


def recording_calls(hot: list[tuple[Any, Any, int, int, int]]) -> list[tuple[Any, Any, int, int, int]]:
    """The dispatches (pipeline, bind group, workgroups x, y, z) as recorded into one compute pass: the pipeline None
    where it is the previous dispatch's, and the bind group None where both are (a compute pass keeps what was set;
    a bind group is set again after another pipeline, whose layout is another object)."""
    calls, pipeline, bind_group = [], None, None
    for p, g, x, y, z in hot:
        same = p is pipeline
        calls.append((None if same else p, None if same and g is bind_group else g, x, y, z))
        pipeline, bind_group = p, g
    return calls


def shared_constant(dev: Any, data: np.ndarray) -> Any:
    """A read-only storage buffer holding `data`: weights with the same bytes are uploaded once per device, so the
    signatures of a model (prefill, decode: separate subgraphs reading the same weights) and the programs of
    several interpreters of one model share them. Kept while a program holding it lives."""
    import wgpu

    raw = data.tobytes() if data.nbytes else b"\0" * 16
    if len(raw) < SHARED_CONSTANT_BYTES:
        return buffer_with_data(dev, raw, wgpu.BufferUsage.STORAGE)
    cache = _CONSTANTS.setdefault(dev, weakref.WeakValueDictionary())
    key = (len(raw), hashlib.blake2b(raw, digest_size=20).digest())
    buf = cache.get(key)
    if buf is None:
        buf = cache[key] = buffer_with_data(dev, raw, wgpu.BufferUsage.STORAGE)
    return buf


class GpuProgram:
    """A compiled GPU partition. inputs/outputs are graph tensor indices exchanged as numpy BHWC arrays."""

    def __init__(self, graph: Graph, ops: list[int], inputs: list[int], outputs: list[int], gpu: GpuDevice,
                 options: EngineOptions, tuned: Tuned | None = None, target: Target | None = None,
                 precision: str | None = None, allocate: bool = True, parametric: bool = False,
                 sparse: list | None = None) -> None:
        """allocate=False: the dispatches' specs and WGSL only (`sources`), no GPU object made (the probe that
        finds a kernel's size-dependent numbers, lowering/parametric.py); parametric: run the device's parametric
        kernels where a dispatch matches one (a graph with symbolic input sizes); sparse: (MaskedBlock, patch,
        expected rate) of the LASNet blocks run spatially sparse, their dispatches indirect (lowering/lasnet.py)."""
        start = time.perf_counter()
        self.graph, self.gpu, self.options = graph, gpu, options
        self.precision = precision or gpu.precision(options.precision)
        self.target = target or gpu.target(options.target)
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.choices = Choices(self.target, tuned, gpu.device_limits)
        f32_names = options.f32_tensors if self.precision == "fp16" else frozenset()
        self.in_place = in_place_pairs(graph, ops, self.inputs, self.outputs)  # caches written in their buffer
        specs, self.root, self.tunable, self.f32 = partition_specs(graph, ops, self.inputs, self.outputs,
                                                                   options.optimize, self.choices, f32_names, sparse,
                                                                   self.precision)
        # a converter writes the tensor it converts (an input's PHWC4 copy, an output's BHWC array); it may also read
        # a direct input's boundary buffer (an output aliasing that input), which is not converted
        converted = {b.tensor for spec in specs if spec.shader in CONVERTERS for b in spec.bindings if b.writable}
        # boundary tensors the dispatches bind in their boundary buffer, no converter (dispatches.direct_boundaries)
        self.direct = frozenset(t for t in [*self.inputs, *self.outputs] if t not in converted
                                and t not in self.in_place and t not in self.in_place.values())
        self.tuned = self.choices.from_cache
        self.info = CompiledInfo(specs=specs)
        self.info.records = usage_records(specs, graph, self.root, codegen.element_bytes("S1", self.precision),
                                          self.f32)
        weight_bytes = sum({id(b.data): b.data.nbytes for spec in specs for b in spec.bindings
                            if b.data is not None}.values())
        # the exact arena planner only where it could save 1% of the weights' bytes (a 30-layer decoder's prefill
        # took the solver its whole 5 s budget to save 69 KB next to 135 MB of weights)
        self.info.plan = plan_memory(self.info.records, options.memory_strategy, gpu.storage_alignment,
                                     min_saving=weight_bytes // 100)
        self._mark_shared(specs)
        self.parametric_dispatches = 0  # dispatches running a parametric pipeline (no compile for their size)
        self.use_parametric = parametric
        self._rendered: dict[int, tuple[KernelSpec, str]] = {}  # WGSL _validate rendered, by spec
        if not allocate:
            self.sources = [(spec, self.render(spec)) for spec in specs]
            return
        self._validate(specs)
        self._lock = threading.RLock()
        self._queue = gpu.device.queue
        self._bound: dict[int, Any] = {}  # input tensor -> a user's buffer it is read from (bind_input)
        self._resident: set[int] = set()  # inputs not uploaded from the host
        self._scratch: dict[str, Any] = {}  # scratch buffers shared by key (Binding.scratch_key)
        self._held: dict[int, Any] = {}  # the constant buffers its bind groups read (shared_constant)
        self._constants: dict[int, Any] = {}  # id of a binding's constant data -> its buffer (_allocate)
        self._feedback: dict[int, Any] = {}  # input -> this program's own output buffer copied into it first
        self._readback: frozenset[int] | None = None  # outputs copied back to the host (None: all)
        self.binding_version = 0  # bumped when a dispatch or binding changes: BoundBuffers made before rebind
        self.uploaded: dict[int, int] = {}  # bytes the last submit wrote per input tensor (upload bookkeeping)
        self._allocate(specs)
        self.phases = Phases()
        self._record = self._recorder()
        self._next_slot = 0
        # Command buffers recorded in advance: "read" for the next invoke that reads back (into the next slot's
        # staging buffer), "gpu_only" for the next one whose outputs stay on the GPU. Submitted when the program
        # is collected (_submit_recorded).
        self._recorded: dict[str, Any] = {"read": self._encode(self._slots[0]), "gpu_only": None}
        self._gpu_only = Slot(None)
        finalizer = weakref.finalize(self, _orphan_recorded, gpu, self._recorded)
        finalizer.atexit = False  # at exit the device goes too
        self.info.compile_ms = (time.perf_counter() - start) * 1e3

    signature = staticmethod(signature)

    def variant(self, index: int, workgroup: tuple[int, int, int] | None = None,
                decomposition: Decomposition | None = None) -> tuple[Any, Any, int, int, int]:
        """Dispatch `index` recompiled with another workgroup size or decomposition, reading and writing the
        same tensors (for the tuner). Raises UnsupportedOpError when the device cannot run it."""
        return self._variant(index, workgroup, decomposition)[1]

    def _variant(self, index: int, workgroup: tuple[int, int, int] | None,
                 decomposition: Decomposition | None) -> tuple[KernelSpec, tuple[Any, Any, int, int, int]]:
        d = self.dispatches[index]
        if decomposition is not None:
            spec = self._redecomposed(d.spec, decomposition)
            self._validate([spec])
            _, pipeline = self._compiled(spec)
            # constants uploaded afresh: a new decomposition packs its weights anew (ids of the old may be reused)
            return spec, (pipeline, self._bind(spec, pipeline, {}, self._bound), *codegen.dispatch_size(spec))
        spec = dataclasses.replace(d.spec, workgroup=workgroup)
        self._validate([spec])
        _, pipeline = self._compiled(spec)
        return spec, (pipeline, d.bind_group, *codegen.dispatch_size(spec))

    def _redecomposed(self, spec: KernelSpec, decomposition: Decomposition) -> KernelSpec:
        """spec in another decomposition, its bindings finished as partition_specs finished the original's: alias
        roots, exact storage, boundary tensors bound in their boundary buffers (direct_boundaries), shared views."""
        spec = redecompose(spec, decomposition)
        finish(spec, self.root, self.choices)
        mark_exact(spec, self.graph, self.f32)
        outputs = set(self.outputs)
        bind_boundaries_directly([spec], frozenset(t for t in self.direct if t not in outputs),
                                 {self.root(t): t for t in self.direct if t in outputs})
        self._mark_shared([spec])
        return spec

    def replace(self, index: int, decomposition: Decomposition) -> None:
        """Run dispatch `index` in another decomposition from now on (tests check every one this way)."""
        spec, hot = self._variant(index, None, decomposition)
        source, _ = self._compiled(spec)
        self.dispatches[index] = Dispatch(spec, hot[0], hot[1], hot[2:], source)
        self._hot[index] = hot
        self._record = self._recorder()
        self.binding_version += 1
        self._drop_recorded()

    def parametric(self, index: int) -> bool:
        """Whether dispatch `index` runs a parametric pipeline (lowering/parametric.py): a new size whose text
        matches compiles nothing for it."""
        return index in self._dims

    def launched(self, index: int) -> int:
        """Invocations dispatch `index` launches (whole workgroups)."""
        return launched(self.dispatches[index].spec)

    def macs(self, index: int) -> int:
        """Multiply-accumulates of dispatch `index`; for kernels without them, the elements it reads."""
        return dispatch_macs(self.dispatches[index].spec, self.graph)

    # -- build ----------------------------------------------------------------------------------------------
    def render(self, spec: KernelSpec) -> str:
        """The dispatch's WGSL for this program's precision and its device's WebGPU implementation."""
        return codegen.render(spec, self.precision, self.gpu.webgpu)

    def _validate(self, specs: list[KernelSpec]) -> None:
        """Everything wgpu would reject at submit (which aborts the process), or not check at all (workgroup
        memory), is rejected here instead: lowering/device_fit.py against the device's limits."""
        limits = self.gpu.device_limits
        for spec in specs:
            source = self.render(spec)
            self._rendered[id(spec)] = (spec, source)  # compiled next (_compiled): rendered once
            problems = violations(spec, limits, self.graph, self.precision, source)
            if problems:
                raise UnsupportedOpError(f"{problems[0]} ({self.gpu.describe()})")
        for size in self.info.plan.object_sizes:
            if size > limits.buffer_bytes:
                raise UnsupportedOpError(f"the memory plan needs a buffer of {size} bytes, more than the device's "
                                         f"{limits.buffer_bytes} per buffer ({self.gpu.describe()})")
        staging = sum(-(-self._raw_bytes(t) // 256) * 256 for t in self.outputs)  # _allocate's read-back buffer
        if staging > limits.buffer_bytes:
            raise UnsupportedOpError(f"the outputs need a read-back buffer of {staging} bytes, more than the "
                                     f"device's {limits.buffer_bytes} per buffer ({self.gpu.describe()})")

    def _mark_shared(self, specs: list[KernelSpec]) -> None:
        """A binding in the same buffer as a binding the dispatch writes is declared read_write (WebGPU forbids
        read-only and writable views of one buffer in one dispatch); bindings of a buffer nothing writes stay
        read-only, as WebGPU also forbids overlapping writable views (two reads of one tensor: a kernel's input
        and a fused prologue's)."""
        for spec in specs:
            tensors = [b for b in spec.bindings if stores_tensor(b)]
            objects = [self.info.plan.placement[b.tensor][0] for b in tensors]
            written = {obj for b, obj in zip(tensors, objects) if b.writable}
            for b, obj in zip(tensors, objects):
                b.shared = objects.count(obj) > 1 and obj in written

    def _binding_bytes(self, b: Binding) -> int:
        return binding_bytes(b, self.graph, self.precision)

    def _upload_data(self, b: Binding) -> np.ndarray:
        """A constant binding's bytes as the shader reads them: storage-typed float data as f16 in fp16 mode."""
        return stored_data(b, self.precision)

    def _allocate(self, specs: list[KernelSpec]) -> None:
        import wgpu

        dev = self.gpu.device
        usage = wgpu.BufferUsage.STORAGE
        plan = self.info.plan
        self.objects = [dev.create_buffer(size=max(16, -(-size // 16) * 16), usage=usage)
                        for size in plan.object_sizes]
        copies = wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST  # COPY_DST: write_output
        self.raw_in = {t: dev.create_buffer(size=self._raw_bytes(t), usage=usage | wgpu.BufferUsage.COPY_DST
                                            | (copies if t in self.in_place else 0))
                       for t in self.inputs}
        written = {out: t for t, out in self.in_place.items()}
        self.raw_out = {t: self.raw_in[written[t]] if t in written else
                        dev.create_buffer(size=self._raw_bytes(t), usage=usage | copies) for t in self.outputs}
        self._make_staging(dev)
        # Quantized inputs and outputs cross as the integers LiteRT exchanges; the GPU holds their real values.
        self._quantized = {t: self.graph.tensors[t] for t in [*self.inputs, *self.outputs]
                           if is_quantized(self.graph.tensors[t])}
        # int32 / bool inputs and outputs cross as their dtype; the GPU holds them as exact f32 values
        self._integers = {t: self.graph.tensors[t] for t in [*self.inputs, *self.outputs]
                          if holds_integers(self.graph.tensors[t])}
        # constant data -> its buffer, kept: bind groups made later (bind_input, rebind) bind the same buffers rather
        # than uploading small constants again (each held by the program in _held)
        constants: dict[int, Any] = self._constants
        self.dispatches: list[Dispatch] = []
        self._dims: dict[int, np.ndarray] = {}  # dispatch -> the numbers its parametric pipeline reads
        for spec in specs:
            spec, source, pipeline, dims = self._compiled_for(spec)
            if dims is not None:
                self._dims[len(self.dispatches)] = dims
            bind_group = self._bind(spec, pipeline, constants, dims=dims)
            self.dispatches.append(Dispatch(spec, pipeline, bind_group, codegen.dispatch_size(spec), source))
        self._hot = [self._hot_entry(d) for d in self.dispatches]

    def _hot_entry(self, d: Dispatch) -> tuple[Any, Any, Any, int, int]:
        """(pipeline, bind group, x, y, z): x an Indirect (the scratch buffer an earlier dispatch filled) for a
        dispatch whose counts the GPU reads."""
        if d.spec.indirect:
            return (d.pipeline, d.bind_group, Indirect(self._scratch[d.spec.indirect]), 1, 1)
        return (d.pipeline, d.bind_group, *d.groups)

    def _make_staging(self, dev: Any) -> None:
        """The read-back side: each output's offset in a staging buffer (256-byte aligned), one staging buffer per
        invoke in flight, and each output's slice of the mapped buffer (tensor, first f32, end, shape)."""
        import wgpu

        self.out_offsets: dict[int, int] = {}
        offset = 0
        for t in self.outputs:
            self.out_offsets[t] = offset
            offset += -(-self._raw_bytes(t) // 256) * 256
        self._slots = [Slot(dev.create_buffer(size=max(offset, 16),
                                              usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST))
                       for _ in range(max(1, self.options.max_inflight))]
        self._out_slices = []
        for t in self.outputs:
            shape = self.graph.tensors[t].shape
            start = self.out_offsets[t] // 4
            self._out_slices.append((t, start, start + int(np.prod(shape, dtype=np.int64)), shape))

    @property
    def hot_dispatches(self) -> list[tuple[Any, Any, int, int, int]]:
        """(pipeline, bind group, workgroups x, y, z) of every dispatch in order: what an invoke records (timers
        and the tuner record them alone)."""
        return self._hot

    def buffers(self) -> list[Any]:
        """Every GPU buffer the program holds: planned tensors, boundary buffers and the constants its bind groups
        read (weights shared by content are the same buffer in every program reading them)."""
        return [*self.objects, *self.raw_in.values(), *self.raw_out.values(), *self._held.values()]

    def bind_buffers(self, buffers: dict[int, Any]) -> BoundBuffers:
        """Bind groups reading and writing these boundary tensors (input or output tensor index -> a caller's
        wgpu buffer: STORAGE usage, at least the tensor's BHWC f32 bytes) instead of the program's own buffers,
        made now and once: a caller holding several copies of a program's state (each language-model session its
        KV cache) submits with its own (submit(bindings=...)). A KV cache written in place is one buffer for its
        input and its output: either index binds both. Host values of a replaced input are uploaded into the
        caller's buffer. ValueError for anything WebGPU would reject at submit."""
        import wgpu

        replaced = dict(buffers)
        for cache, written in self.in_place.items():
            if cache in replaced or written in replaced:
                one = replaced.get(cache, replaced.get(written))
                if replaced.setdefault(cache, one) is not one or replaced.setdefault(written, one) is not one:
                    raise ValueError(f"a KV cache written in place (tensor {cache}) is one buffer: give one")
        pairs = {frozenset(p) for p in self.in_place.items()}
        for t, buf in replaced.items():
            if t not in self.raw_in and t not in self.raw_out:
                raise ValueError(f"tensor {t} is not an input or output of this GPU program")
            if not int(buf.usage) & wgpu.BufferUsage.STORAGE:
                raise ValueError(f"the buffer for tensor {t} needs STORAGE usage")
            if int(buf.size) < self._raw_bytes(t):
                raise ValueError(f"the buffer for tensor {t} holds {int(buf.size)} bytes, less than its "
                                 f"{self._raw_bytes(t)}")
            if t in self.raw_in and t not in self._resident and not int(buf.usage) & wgpu.BufferUsage.COPY_DST:
                raise ValueError(f"input {t} is uploaded from the host: its buffer needs COPY_DST usage")
            shared = [u for u, other in replaced.items() if other is buf and u != t and frozenset((t, u)) not in pairs]
            if shared:
                raise ValueError(f"tensors {t} and {shared[0]} would be bound to one buffer")
        bindings = BoundBuffers(self, replaced)
        self.rebind(bindings)
        return bindings

    def rebind(self, bindings: BoundBuffers) -> None:
        """Make the bind groups of `bindings` for the program's dispatches as they are now: at bind_buffers, and
        at the next submit after replace / bind_input changed them (binding_version). ValueError, before anything
        is queued, for another program's bindings or a tensor the program now copies into its input buffer."""
        if bindings.program is not self:
            raise ValueError("these bindings were made for another program (bind_buffers)")
        with self._lock:
            if bindings.version == self.binding_version:
                return
            copied = sorted(t for t in bindings.buffers if t in self._feedback)
            if copied:
                raise ValueError(f"tensor {copied[0]} is copied into its input buffer at each invoke (bind_input "
                                 "with an output of the program): it cannot be held in a caller's buffer")
            hot = []
            for k, d in enumerate(self.dispatches):
                if any(b.raw and b.tensor in bindings.buffers for b in d.spec.bindings):
                    group = self._bind(d.spec, d.pipeline, self._constants, self._bound, dims=self._dims.get(k),
                                       replaced=bindings.buffers)
                    pipeline, _, *counts = self._hot_entry(d)  # counts: an Indirect where the GPU sets them
                    hot.append((pipeline, group, *counts))
                else:
                    hot.append(self._hot[k])
            bindings.hot, bindings.record = hot, self._recorder(hot)
            bindings.version = self.binding_version

    def encode_invoke(self) -> Any:
        """A reading invoke's command buffer, recorded and not submitted (profile times the recording alone)."""
        return self._encode(self._slots[0])

    def constant_buffers(self) -> dict[int, int]:
        """id -> bytes of every GPU buffer holding this program's constants (weights shared by content are one
        buffer: programs of one device that read the same weights hold the same ids)."""
        return {key: int(buf.size) for key, buf in self._held.items()}

    def _bind(self, spec: KernelSpec, pipeline: Any, constants: dict[int, Any],
              inputs: dict[int, Any] | None = None, dims: np.ndarray | None = None,
              replaced: dict[int, Any] | None = None) -> Any:
        """The bind group of a spec: tensors where the memory plan put them, constants uploaded once each, raw
        inputs from `inputs` (a user's buffers, set_input_buffer) or the program's own buffers; `dims`: the
        numbers a parametric pipeline reads (lowering/parametric.py), bound after the spec's own bindings;
        `replaced`: boundary tensors (read or written) held in a caller's buffers instead (bind_buffers)."""
        import wgpu

        dev = self.gpu.device
        usage = wgpu.BufferUsage.STORAGE
        entries = []
        if dims is not None:
            buf = dev.create_buffer_with_data(data=np.ascontiguousarray(dims, np.uint32).tobytes(), usage=usage)
            entries.append({"binding": len(codegen.bound(spec)), "resource": {"buffer": buf, "offset": 0,
                                                                              "size": buf.size}})
        for i, b in enumerate(codegen.bound(spec)):
            if b.data is not None:
                buf = constants.get(id(b.data))
                if buf is None:
                    buf = constants[id(b.data)] = shared_constant(dev, self._upload_data(b))
                self._held[id(buf)] = buf  # keeps it in the device's cache while this program lives
                resource = {"buffer": buf, "offset": 0, "size": buf.size}
            elif b.scratch_bytes:
                buf = self._scratch.get(b.scratch_key) if b.scratch_key else None
                if buf is None or buf.size < b.scratch_bytes:
                    # INDIRECT: a scratch buffer may hold the workgroup counts of a later dispatch (KernelSpec.indirect)
                    buf = dev.create_buffer(size=-(-b.scratch_bytes // 16) * 16, usage=usage
                                            | wgpu.BufferUsage.INDIRECT)
                    if b.scratch_key:
                        self._scratch[b.scratch_key] = buf
                resource = {"buffer": buf, "offset": 0, "size": buf.size}
            elif b.raw and replaced and b.tensor in replaced:
                buf = replaced[b.tensor]
                resource = {"buffer": buf, "offset": 0, "size": self._raw_bytes(b.tensor)}
            elif b.raw and not b.writable and inputs and b.tensor in inputs:
                buf = inputs[b.tensor]
                # a user's buffer holds the tensor's bytes, not necessarily rounded up to 16 as ours are
                resource = {"buffer": buf, "offset": 0, "size": min(self._raw_bytes(b.tensor), buf.size)}
            elif b.raw:
                buf = (self.raw_in if b.tensor in self.raw_in and not b.writable else self.raw_out)[b.tensor]
                resource = {"buffer": buf, "offset": 0, "size": buf.size}
            else:
                obj, off = self.info.plan.placement[b.tensor]
                resource = {"buffer": self.objects[obj], "offset": off, "size": self._binding_bytes(b)}
            entries.append({"binding": i, "resource": resource})
        return dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)

    def padded(self, t: int) -> bool:
        """Input t is read directly as PHWC4 vec4s its BHWC bytes do not fill (a lone pixel of C < 4): the rest of
        its buffer is zero padding, never written (copies into it move the tensor's bytes only)."""
        return t in self.direct and t in self.raw_in and self.graph.tensors[t].size * 4 % 16 != 0

    def _raw_bytes(self, t: int) -> int:
        return max(16, -(-int(np.prod(self.graph.tensors[t].shape, dtype=np.int64)) * 4 // 16) * 16)

    def _compiled(self, spec: KernelSpec) -> tuple[str, Any]:
        """The spec's WGSL and its pipeline; identical text compiles once per device."""
        rendered = self._rendered.pop(id(spec), None)
        source = rendered[1] if rendered is not None and rendered[0] is spec else self.render(spec)
        pipeline = self.gpu.pipelines.get(source)
        if pipeline is None:
            pipeline = self.gpu.pipelines[source] = self._pipeline(source, spec)
        return source, pipeline

    def _compiled_for(self, spec: KernelSpec) -> tuple[KernelSpec, str, Any, np.ndarray | None]:
        """The spec (its workgroup size may be a parametric version's), its WGSL, its pipeline and, when the
        pipeline is a parametric kernel's (compiled once for every size that matches it,
        lowering/parametric.py), the numbers it reads for this size."""
        source = self.render(spec)
        pipeline = self.gpu.pipelines.get(source)
        if pipeline is not None:
            return spec, source, pipeline, None
        versions = self.gpu.parametric.get(spec.shader, []) if self.use_parametric else []
        baked = spec
        # the version in the decomposition the policy picked for this size first (its shape class), then the others
        for kernel in sorted(versions, key=lambda v: v.decomposition != baked.decomposition):
            spec = self._as_version(baked, kernel)
            if spec is None:
                continue
            source = self.render(spec)
            values = kernel.values(source)
            if values is None or kernel.binding != len(codegen.bound(spec)):
                continue
            if kernel.pipeline is None and not self.compile_parametric(kernel, spec):
                versions.remove(kernel)
                continue
            self.parametric_dispatches += 1
            return spec, source, kernel.pipeline, values
        if spec is not baked:
            spec = baked
            source = self.render(spec)
        pipeline = self.gpu.pipelines.get(source) or self._pipeline(source, spec)
        self.gpu.pipelines[source] = pipeline
        return spec, source, pipeline, None

    def _as_version(self, spec: KernelSpec, kernel: Any) -> KernelSpec | None:
        return self.as_version(spec, kernel.decomposition, kernel.workgroup, kernel.unbaked)

    def compile_parametric(self, kernel: Any, spec: KernelSpec) -> bool:
        """Compile a parametric kernel's pipeline (spec: one of its sizes, for the bindings' layout); False when
        its text does not compile (a hoisted number in a place WGSL fixes)."""
        try:
            kernel.pipeline = self._pipeline(kernel.source, spec, dims=True)
        except RuntimeError:
            return False
        return True

    def as_version(self, spec: KernelSpec, decomposition: Decomposition | None,
                   workgroup: tuple[int, int, int] | None, unbake: bool) -> KernelSpec | None:
        """The spec in a parametric version's decomposition and workgroup size (every decomposition a kernel
        offers is correct for every size; the workgroup size of a kernel without them is free; None: the one the
        decomposition gives), its small constants in buffers where `unbake`; None when it cannot be."""
        if decomposition is not None and spec.decomposition != decomposition:
            try:
                spec = self._redecomposed(spec, decomposition)
            except (ValueError, KeyError):
                return None
        elif decomposition is None and workgroup is not None and tuple(spec.workgroup) != tuple(workgroup):
            spec = dataclasses.replace(spec, workgroup=tuple(workgroup))
        if unbake:
            spec = unbaked(spec) or spec
        if workgroup is not None and tuple(spec.workgroup) != tuple(workgroup):
            return None
        try:
            self._validate([spec])
        except GpuEngineError:
            return None
        return spec

    def _pipeline(self, source: str, spec: KernelSpec, dims: bool = False) -> Any:
        import wgpu

        dev = self.gpu.device
        layout_entries = [{
            "binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
            "buffer": {"type": wgpu.BufferBindingType.storage if b.writable or b.shared
                       else wgpu.BufferBindingType.read_only_storage},
        } for i, b in enumerate(codegen.bound(spec))]
        if dims:
            layout_entries.append({"binding": len(layout_entries), "visibility": wgpu.ShaderStage.COMPUTE,
                                   "buffer": {"type": wgpu.BufferBindingType.read_only_storage}})
        bgl = dev.create_bind_group_layout(entries=layout_entries)
        layout = dev.create_pipeline_layout(bind_group_layouts=[bgl])
        try:
            module = dev.create_shader_module(code=source)
            return dev.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": "main"})
        except Exception as e:  # noqa: BLE001 - a shader bug must name the kernel, not crash later
            raise RuntimeError(f"gpuengine internal error: kernel {spec.shader} failed to compile on "
                               f"{NAMES[self.gpu.webgpu]}: {e}\n"
                               f"{source}") from e

    # -- hot loop -------------------------------------------------------------------------------------------
    def _recorder(self, hot: list[tuple[Any, Any, int, int, int]] | None = None) -> Any:
        """A function recording every dispatch into a compute pass, its arguments prepared here (at allocation, and
        again when a dispatch or binding changes): a pipeline or bind group is set only where it differs from the
        previous dispatch's (recording_calls). Through wgpu-native's C functions when the wgpu package exposes them
        (about half the cost of its Python wrapper), else through the wrapper."""
        calls = recording_calls(self._hot if hot is None else hot)
        try:
            if self.gpu.webgpu != "wgpu":
                raise ImportError("wgpu-native's C functions take only wgpu-native's objects")
            from wgpu.backends.wgpu_native._api import ffi, lib

            set_pipeline = lib.wgpuComputePassEncoderSetPipeline
            set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
            dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
            dispatch_indirect = lib.wgpuComputePassEncoderDispatchWorkgroupsIndirect
            # an Indirect becomes (its buffer, offset, -1): z < 0 marks the indirect dispatches
            raw = [(None if p is None else p._internal, None if g is None else g._internal,  # noqa: SLF001
                    *((x.buffer._internal, x.offset, -1) if isinstance(x, Indirect) else (x, y, z)))  # noqa: SLF001
                   for p, g, x, y, z in calls]
            null = ffi.NULL
        except (ImportError, AttributeError):  # another wgpu backend or version: the public API
            def record(compute: Any) -> None:
                for pipeline, bind_group, x, y, z in calls:
                    if pipeline is not None:
                        compute.set_pipeline(pipeline)
                    if bind_group is not None:
                        compute.set_bind_group(0, bind_group)
                    record_dispatch(compute, x, y, z)

            return record

        def record_raw(compute: Any) -> None:
            handle = compute._internal  # noqa: SLF001
            for pipeline, bind_group, x, y, z in raw:
                if pipeline is not None:
                    set_pipeline(handle, pipeline)
                if bind_group is not None:
                    set_bind_group(handle, 0, bind_group, 0, null)
                if z < 0:
                    dispatch_indirect(handle, x, y)
                else:
                    dispatch(handle, x, y, z)

        return record_raw

    @property
    def recorded_calls(self) -> int:
        """Host calls recording one invoke's dispatches makes (set_pipeline, set_bind_group, dispatch_workgroups)."""
        return sum((p is not None) + (g is not None) + 1 for p, g, *_ in recording_calls(self._hot))

    def _encode(self, slot: Slot | None, record: Any = None) -> Any:
        """One invoke's command buffer: the compute pass (recorded by `record`, a BoundBuffers' recorder, or the
        program's own), then (when the outputs come back to the host) the copies of the outputs to the slot's
        staging buffer."""
        encoder = self.gpu.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        (record or self._record)(compute)
        compute.end()
        if slot is not None:
            for t, buf in self.raw_out.items():
                if self._readback is None or t in self._readback:
                    encoder.copy_buffer_to_buffer(buf, 0, slot.staging, self.out_offsets[t], buf.size)
        return encoder.finish()

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """One blocking invoke: outputs as numpy BHWC arrays."""
        return self.collect(self.submit(feeds))

    def submit(self, feeds: dict[int, np.ndarray], read: bool = True, track: bool = False,
               after: tuple[Any, ...] = (), bindings: BoundBuffers | None = None, watch: bool = True) -> Submitted:
        """Upload the inputs and submit an invoke; `collect` gives its outputs. read=False: the outputs stay on
        the GPU (output_buffer), nothing is copied back. track: done() can tell when the GPU has finished.
        after: the caller's command buffers, run right after this invoke in the same queue submission (a decode
        loop's sampler reading the logits buffer). bindings: run with a caller's buffers (bind_buffers: made once,
        its command buffer recorded now; a reading invoke takes the slot the next invoke would and keeps it).
        watch=False: no WorkDone for an invoke whose outputs stay on the GPU (the caller learns when it is done
        otherwise, as a decode loop from its sampler's readback): collect() then waits for the queue."""
        self.gpu.check_runs()  # Dawn's Null device: one line saying so, nothing submitted
        with self._lock:  # slots, recorded command buffers and bindings are shared by every caller
            if not self.raw_in and not self.gpu.alive():  # else the input upload finds out, before the submit
                raise RuntimeError(DEVICE_LOST)
            try:
                return self._submit(feeds, read, track, after, bindings, watch)
            except Exception as e:  # wgpu's errors, or AttributeError from a destroyed device's poller
                if not self.gpu.alive():
                    self._recorded.update(read=None, gpu_only=None)  # never to be submitted: that would abort
                    raise RuntimeError(DEVICE_LOST) from e
                raise

    def _submit(self, feeds: dict[int, np.ndarray], read: bool, track: bool, after: tuple[Any, ...] = (),
                bindings: BoundBuffers | None = None, watch: bool = True) -> Submitted:
        clock = time.perf_counter
        queue = self._queue
        if bindings is not None:
            self.rebind(bindings)  # before anything is queued
        if self.gpu.orphans:  # what collected programs recorded: submitted before this invoke, never leaked
            self.gpu.submit_orphans()
        if read:  # slots in turn: the one reused is the oldest, collected first if its job was never read
            slot = self._slots[self._next_slot]
            if bindings is None:  # a bound invoke leaves the ring where it is: the recorded "read" is for this slot
                self._next_slot = (self._next_slot + 1) % len(self._slots)
            if slot.job is not None and slot.job.results is None:
                self._collect(slot.job)
        else:
            slot = self._gpu_only
        t0 = clock()
        uploaded = {}
        own = bindings.buffers if bindings is not None else {}
        for t, buf in self.raw_in.items():
            buf = own.get(t, buf)
            if t not in self._resident:
                value = dequantize(self._quantized[t], feeds[t]) if t in self._quantized else feeds[t]
                if t in self._integers:
                    value = host_value(value, self._integers[t])
                value = np.ascontiguousarray(value, dtype=np.float32)
                queue.write_buffer(buf, 0, value)
                uploaded[t] = value.nbytes
        self.uploaded = uploaded
        t1 = clock()
        key = "read" if read else "gpu_only"
        if bindings is not None:  # recorded now: one recorded ahead would leak unless submitted (_orphan_recorded)
            command = self._encode(slot if read else None, bindings.record)
        else:
            command = self._recorded[key] if self._recorded[key] is not None else self._encode(slot if read else None)
            self._recorded[key] = None
        queue.submit([*self._feedback_copies(), command, *after])
        t2 = clock()
        job = Submitted(slot if read else None, readback=self._readback if read else frozenset())
        # While the GPU runs this invoke: release the slot's previous command buffer (wgpu-native drops its
        # references to every bind group and pipeline then) and record the slot's next one.
        slot.in_flight = command
        slot.job = job
        if bindings is None:
            self._recorded[key] = self._encode(self._slots[self._next_slot] if read else None)
        if track or (not read and watch):
            job.work = WorkDone(self.gpu)
        job.times = (t1 - t0, t2 - t1, clock() - t2)
        return job

    def collect(self, job: Submitted) -> dict[int, np.ndarray]:
        """The outputs of a submitted invoke (blocking until the GPU has finished it); {} when they stayed on
        the GPU. Idempotent."""
        with self._lock:
            try:
                return self._collect(job)
            except Exception as e:
                if not self.gpu.alive():
                    raise RuntimeError(DEVICE_LOST) from e
                raise

    def _collect(self, job: Submitted) -> dict[int, np.ndarray]:
        if job.results is not None:
            return job.results
        clock = time.perf_counter
        t3 = clock()
        if job.slot is None:
            (job.work or WorkDone(self.gpu)).wait()
            job.results = {}
            return job.results
        staging = job.slot.staging
        staging.map_async("READ_NOSYNC").sync_wait()
        t4 = clock()
        try:
            data = np.frombuffer(staging.read_mapped(copy=False), np.float32)
            job.results = {t: data[start:end].reshape(shape).copy() for t, start, end, shape in self._out_slices
                           if job.readback is None or t in job.readback}
            for t, tensor in self._quantized.items():
                if t in job.results:
                    job.results[t] = quantized(job.results[t], tensor)
            for t, tensor in self._integers.items():
                if t in job.results:
                    job.results[t] = typed(job.results[t], tensor)
        finally:
            staging.unmap()
        upload, submit, record = job.times
        self.phases = Phases(upload=upload, submit=submit, record_next=record, wait=t4 - t3, readback=clock() - t4)
        return job.results

    def done(self, job: Submitted) -> bool:
        """True once the GPU has finished the invoke (for a job submitted with track=True, or read=False)."""
        return job.results is not None or (job.work is not None and job.work.done)

    # -- GPU-resident inputs and outputs --------------------------------------------------------------------
    def write_output(self, t: int, value: np.ndarray) -> None:
        """Write a host value (BHWC f32) into output tensor t's buffer: a host-driven loop (control_flow.py) seeds
        the buffer its body's other instance reads as the loop variable's initial value."""
        with self._lock:
            if not self.gpu.alive():
                raise RuntimeError(DEVICE_LOST)
            self._queue.write_buffer(self.raw_out[t], 0, np.ascontiguousarray(value, dtype=np.float32))

    def read_outputs(self) -> dict[int, np.ndarray]:
        """The output buffers as they are now (what the last submit, read=False included, or write_output left
        there), copied back through the next staging slot: a host-driven loop reads its final values once."""
        with self._lock:
            if not self.gpu.alive():
                raise RuntimeError(DEVICE_LOST)
            try:
                slot = self._slots[self._next_slot]
                self._next_slot = (self._next_slot + 1) % len(self._slots)
                if slot.job is not None and slot.job.results is None:
                    self._collect(slot.job)
                encoder = self.gpu.device.create_command_encoder()
                for t, buf in self.raw_out.items():
                    encoder.copy_buffer_to_buffer(buf, 0, slot.staging, self.out_offsets[t], buf.size)
                command = encoder.finish()
                self._queue.submit([command])
                slot.in_flight, slot.job = command, Submitted(slot)
                # the command buffer recorded for the next read used the slot just taken: record it afresh
                _orphan_recorded(self.gpu, {"read": self._recorded["read"]})
                self._recorded["read"] = None
                return self._collect(slot.job)
            except Exception as e:
                if not self.gpu.alive():
                    raise RuntimeError(DEVICE_LOST) from e
                raise

    def copy_into_inputs(self, sources: list[tuple[int, Any]]) -> None:
        """Copy each (input tensor, buffer) into the input's own buffer on the GPU, queued ahead of the next invoke
        (a caller's buffer whose input is in copy mode: bound, it would re-record at every change)."""
        encoder = self.gpu.device.create_command_encoder()
        for t, source in sources:
            encoder.copy_buffer_to_buffer(source, 0, self.raw_in[t], 0, self.graph.tensors[t].size * 4)
        self._queue.submit([encoder.finish()])

    def copy_outputs(self, destinations: list[tuple[int, Any]]) -> None:
        """Copy each output tensor's buffer, as the last invoke left it, into (output tensor, buffer) on the GPU."""
        encoder = self.gpu.device.create_command_encoder()
        for t, destination in destinations:
            encoder.copy_buffer_to_buffer(self.raw_out[t], 0, destination, 0, self.graph.tensors[t].size * 4)
        self._queue.submit([encoder.finish()])

    def output_buffer(self, t: int) -> Any:
        """The GPU buffer that holds output tensor t, BHWC row-major f32, after each invoke."""
        return self.raw_out[t]

    def input_buffer(self, t: int) -> Any:
        """The GPU buffer input tensor t is read from (a user's buffer once bound with bind_input)."""
        return self._bound.get(t, self.raw_in[t])

    def set_resident(self, t: int, resident: bool) -> None:
        """resident: input t is not uploaded from the host (its buffer is written on the GPU)."""
        with self._lock:
            (self._resident.add if resident else self._resident.discard)(t)

    def _feedback_copies(self) -> list[Any]:
        """The copies of this program's own outputs into the inputs they feed (the previous invoke's values, before
        this one overwrites them), in a command buffer of their own: one recorded in advance may be submitted
        again as an orphan (_drop_recorded), which must recompute the last invoke, never advance the state."""
        if not self._feedback:
            return []
        encoder = self.gpu.device.create_command_encoder()
        for t, source in self._feedback.items():
            size = self.graph.tensors[t].size * 4 if self.padded(t) else self._raw_bytes(t)
            encoder.copy_buffer_to_buffer(source, 0, self.raw_in[t], 0, size)
        return [encoder.finish()]

    def set_readback(self, outputs: frozenset[int] | None) -> None:
        """Copy only these outputs back to the host from now on (None: all); the others stay on the GPU."""
        with self._lock:
            outputs = None if outputs is None else frozenset(outputs)
            if outputs != self._readback:
                self._readback = outputs
                self._drop_recorded()

    def bind_input(self, t: int, buffer: Any | None) -> None:
        """Read input tensor t from `buffer` (BHWC f32, checked by the caller) instead of uploading it; None
        restores the program's own buffer and uploads. One of this program's own output buffers is copied into
        the input's buffer at the start of each invoke instead (on the GPU): bound directly, a dispatch could
        write what a later one still reads, or bind it read-only and writable at once."""
        with self._lock:
            self._feedback.pop(t, None)
            if buffer is None:
                self._bound.pop(t, None)
            elif t in self.in_place and buffer is self.raw_in[t]:
                self._bound.pop(t, None)  # a cache written in place fed its own output: already there, no copy
            elif (t in self.in_place or any(buffer is out for out in self.raw_out.values())
                  or (self.padded(t) and buffer.usage & 4)):
                # an in-place cache is never read from another's buffer (the write would change it): copied in; so
                # is a lone pixel read directly as a padded vec4 (its padding must stay zero: the tensor's bytes)
                if not buffer.usage & 4:  # wgpu.BufferUsage.COPY_SRC
                    raise ValueError("a buffer fed to a KV cache written in place needs COPY_SRC usage")
                self._bound.pop(t, None)
                self._feedback[t] = buffer
            elif self.padded(t) and buffer.size < self._raw_bytes(t):
                raise ValueError(f"input {t} is read as whole vec4s ({self._raw_bytes(t)} bytes): its buffer needs "
                                 "COPY_SRC usage (copied in) or that many bytes")
            else:
                self._bound[t] = buffer
            self.set_resident(t, buffer is not None)
            for k, d in enumerate(self.dispatches):
                if any(b.raw and not b.writable and b.tensor == t for b in d.spec.bindings):
                    d.bind_group = self._bind(d.spec, d.pipeline, self._constants, self._bound,
                                              dims=self._dims.get(k))
                    self._hot[k] = self._hot_entry(d)
            self._record = self._recorder()
            self.binding_version += 1
            self._drop_recorded()

    def _drop_recorded(self) -> None:
        """The recorded command buffers no longer match the dispatches: submit them (a finished command buffer
        that is never submitted leaks, see _submit_recorded) and record afresh at the next invoke. Executing
        them is harmless: they write what the next invoke writes again (the staging buffer of the next slot, whose
        job is read back first if it was not yet)."""
        job = self._slots[self._next_slot].job
        if self._recorded["read"] is not None and job is not None and job.results is None:
            self._collect(job)
        _orphan_recorded(self.gpu, self._recorded)
        self.gpu.submit_orphans()
        self._recorded.update(read=None, gpu_only=None)
