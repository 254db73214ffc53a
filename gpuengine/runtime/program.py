"""One GPU partition compiled once: pipelines, buffers per memory plan, bind groups; then a short hot loop.

Everything is built in the constructor (called from allocate_tensors); `run` only writes inputs, records one
compute pass, submits once and reads back through one persistent staging buffer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import codegen
from ..errors import UnsupportedOpError
from ..fusion import lower
from ..kernels import convert
from ..kernels.base import Binding, KernelSpec
from ..layout import phwc4_elements
from ..memory import MemoryPlan, UsageRecord, plan_memory
from ..model.ir import Graph
from ..tuning.defaults import default_workgroup
from .device import GpuDevice


@dataclass
class EngineOptions:
    """Engine extras, passed as Interpreter keyword options."""

    adapter: str | None = None
    precision: str = "fp32"
    memory_strategy: str = "best"
    workgroup_cache: str | None = None  # path of a tuning cache; None: the default location
    optimize: bool = True  # graph transformations and fusion


@dataclass
class Dispatch:
    spec: KernelSpec
    pipeline: Any
    bind_group: Any
    groups: tuple[int, int, int]
    source: str


@dataclass
class CompiledInfo:
    specs: list[KernelSpec] = field(default_factory=list)
    records: list[UsageRecord] = field(default_factory=list)
    plan: MemoryPlan | None = None
    compile_ms: float = 0.0


def usage_records(specs: list[KernelSpec], graph: Graph, root: Any) -> list[UsageRecord]:
    """First/last dispatch of every PHWC4 tensor the partition keeps on the GPU (raw boundary buffers excluded)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, spec in enumerate(specs):
        for b in spec.bindings:
            if b.tensor is None or b.raw:
                continue
            t = root(b.tensor)
            first.setdefault(t, step)
            last[t] = step
    return [UsageRecord(tensor=t, size=phwc4_elements(graph.tensors[t].shape) * 4, first=first[t], last=last[t])
            for t in sorted(first)]


class GpuProgram:
    """A compiled GPU partition. inputs/outputs are graph tensor indices exchanged as numpy BHWC arrays."""

    def __init__(self, graph: Graph, ops: list[int], inputs: list[int], outputs: list[int], gpu: GpuDevice,
                 options: EngineOptions, workgroups: dict[str, tuple[int, int, int]] | None = None) -> None:
        start = time.perf_counter()
        self.graph, self.gpu, self.options = graph, gpu, options
        self.inputs, self.outputs = list(inputs), list(outputs)
        specs, aliases = lower(graph, ops, outputs, fuse=options.optimize, ready_before=set(inputs))

        def root(t: int) -> int:
            while t in aliases:
                t = aliases[t]
            return t

        self.root = root
        specs = ([convert.to_phwc4(graph, t) for t in self.inputs] + specs
                 + [convert.from_phwc4(graph, t, root(t)) for t in self.outputs])
        self.tunable: list[bool] = []
        self.tuned = 0
        for spec in specs:
            for b in spec.bindings:
                if b.tensor is not None and not b.raw:
                    b.tensor = root(b.tensor)
            self.tunable.append(spec.workgroup is None)
            if spec.workgroup is None:
                tuned = (workgroups or {}).get(self.signature(spec))
                self.tuned += tuned is not None
                spec.workgroup = tuned or default_workgroup(
                    spec.grid, int(gpu.limits.get("max-compute-invocations-per-workgroup", 256)))
        self.info = CompiledInfo(specs=specs)
        self.info.records = usage_records(specs, graph, root)
        self.info.plan = plan_memory(self.info.records, options.memory_strategy, gpu.storage_alignment)
        self._mark_shared(specs)
        self._validate(specs)
        self._allocate(specs)
        self.info.compile_ms = (time.perf_counter() - start) * 1e3

    @staticmethod
    def signature(spec: KernelSpec) -> str:
        """What a tuned workgroup size is keyed by: the template, its baked numbers, fused code and the grid."""
        params = ",".join(f"{k}={v}" for k, v in sorted(spec.params.items()))
        fused = hashlib.sha1("\n".join([*spec.epilogue, *spec.functions]).encode()).hexdigest()[:12]
        return f"{spec.shader}|{params}|{fused}|grid={spec.grid}"

    def variant(self, index: int, workgroup: tuple[int, int, int]) -> tuple[Any, Any, int, int, int]:
        """Dispatch `index` recompiled with another workgroup size, same buffers (for the tuner)."""
        d = self.dispatches[index]
        spec = dataclasses.replace(d.spec, workgroup=workgroup)
        self._validate([spec])
        _, pipeline = self._compiled(spec)
        return (pipeline, d.bind_group, *codegen.dispatch_size(spec))

    # -- build ----------------------------------------------------------------------------------------------
    def _validate(self, specs: list[KernelSpec]) -> None:
        """Everything wgpu would reject at submit (which aborts the process) is rejected here instead."""
        limits = self.gpu.limits
        max_groups = int(limits.get("max-compute-workgroups-per-dimension", 65535))
        max_binding = int(limits.get("max-storage-buffer-binding-size", 1 << 27))
        max_bindings = int(limits.get("max-storage-buffers-per-shader-stage", 8))
        max_inv = int(limits.get("max-compute-invocations-per-workgroup", 256))
        for spec in specs:
            what = f"kernel {spec.shader} ({spec.label or 'op ' + str(spec.ops)})"
            wg = spec.workgroup
            if wg is None or min(wg) < 1 or wg[0] * wg[1] * wg[2] > max_inv:
                raise UnsupportedOpError(f"{what}: workgroup {wg} exceeds the device's {max_inv} invocations")
            groups = codegen.dispatch_size(spec)
            if max(groups) > max_groups:
                raise UnsupportedOpError(f"{what}: grid {spec.grid} needs {groups} workgroups, more than the "
                                         f"device allows per dimension ({max_groups})")
            if len(codegen.bound(spec)) > max_bindings:
                raise UnsupportedOpError(f"{what}: {len(codegen.bound(spec))} bindings > device limit {max_bindings}")
            for b in spec.bindings:
                if self._binding_bytes(b) > max_binding:
                    raise UnsupportedOpError(f"{what}: binding {b.name} of {self._binding_bytes(b)} bytes exceeds "
                                             f"the device's storage binding limit of {max_binding} bytes")

    def _mark_shared(self, specs: list[KernelSpec]) -> None:
        for spec in specs:
            tensors = [b for b in spec.bindings if b.tensor is not None and not b.raw and b.data is None
                       and not b.scratch_bytes]
            objects = [self.info.plan.placement[b.tensor][0] for b in tensors]
            for b, obj in zip(tensors, objects):
                b.shared = objects.count(obj) > 1

    def _binding_bytes(self, b: Binding) -> int:
        if b.data is not None:
            return max(4, b.data.nbytes)
        if b.scratch_bytes:
            return b.scratch_bytes
        shape = self.graph.tensors[b.tensor].shape
        if b.raw:
            return max(4, int(np.prod(shape, dtype=np.int64)) * 4)
        return max(16, phwc4_elements(shape) * 4)

    def _allocate(self, specs: list[KernelSpec]) -> None:
        import wgpu

        dev = self.gpu.device
        usage = wgpu.BufferUsage.STORAGE
        plan = self.info.plan
        self.objects = [dev.create_buffer(size=max(16, -(-size // 16) * 16), usage=usage)
                        for size in plan.object_sizes]
        self.raw_in = {t: dev.create_buffer(size=self._raw_bytes(t), usage=usage | wgpu.BufferUsage.COPY_DST)
                       for t in self.inputs}
        self.raw_out = {t: dev.create_buffer(size=self._raw_bytes(t), usage=usage | wgpu.BufferUsage.COPY_SRC)
                        for t in self.outputs}
        self.out_offsets: dict[int, int] = {}
        offset = 0
        for t in self.outputs:
            self.out_offsets[t] = offset
            offset += -(-self._raw_bytes(t) // 256) * 256
        self.staging = dev.create_buffer(size=max(offset, 16),
                                         usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        constants: dict[int, Any] = {}
        self.dispatches: list[Dispatch] = []
        for spec in specs:
            source, pipeline = self._compiled(spec)
            entries = []
            for i, b in enumerate(codegen.bound(spec)):
                if b.data is not None:
                    buf = constants.get(id(b.data))
                    if buf is None:
                        data = np.ascontiguousarray(b.data)
                        buf = constants[id(b.data)] = dev.create_buffer_with_data(
                            data=data.tobytes() if data.nbytes else b"\0" * 16, usage=usage)
                    resource = {"buffer": buf, "offset": 0, "size": buf.size}
                elif b.scratch_bytes:
                    buf = dev.create_buffer(size=-(-b.scratch_bytes // 16) * 16, usage=usage)
                    resource = {"buffer": buf, "offset": 0, "size": buf.size}
                elif b.raw:
                    buf = (self.raw_in if b.tensor in self.raw_in and not b.writable else self.raw_out)[b.tensor]
                    resource = {"buffer": buf, "offset": 0, "size": buf.size}
                else:
                    obj, off = plan.placement[b.tensor]
                    resource = {"buffer": self.objects[obj], "offset": off, "size": self._binding_bytes(b)}
                entries.append({"binding": i, "resource": resource})
            bind_group = dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
            self.dispatches.append(Dispatch(spec, pipeline, bind_group, codegen.dispatch_size(spec), source))
        self._hot = [(d.pipeline, d.bind_group, *d.groups) for d in self.dispatches]

    def _raw_bytes(self, t: int) -> int:
        return max(16, -(-int(np.prod(self.graph.tensors[t].shape, dtype=np.int64)) * 4 // 16) * 16)

    def _compiled(self, spec: KernelSpec) -> tuple[str, Any]:
        """The spec's WGSL and its pipeline; identical text compiles once per device."""
        source = codegen.render(spec)
        pipeline = self.gpu.pipelines.get(source)
        if pipeline is None:
            pipeline = self.gpu.pipelines[source] = self._pipeline(source, spec)
        return source, pipeline

    def _pipeline(self, source: str, spec: KernelSpec) -> Any:
        import wgpu

        dev = self.gpu.device
        layout_entries = [{
            "binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
            "buffer": {"type": wgpu.BufferBindingType.storage if b.writable or b.shared
                       else wgpu.BufferBindingType.read_only_storage},
        } for i, b in enumerate(codegen.bound(spec))]
        bgl = dev.create_bind_group_layout(entries=layout_entries)
        layout = dev.create_pipeline_layout(bind_group_layouts=[bgl])
        try:
            module = dev.create_shader_module(code=source)
            return dev.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": "main"})
        except Exception as e:  # noqa: BLE001 - a shader bug must name the kernel, not crash later
            raise RuntimeError(f"gpuengine internal error: kernel {spec.shader} failed to compile: {e}\n"
                               f"{source}") from e

    # -- hot loop -------------------------------------------------------------------------------------------
    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        dev = self.gpu.device
        queue = dev.queue
        for t, buf in self.raw_in.items():
            queue.write_buffer(buf, 0, np.ascontiguousarray(feeds[t], dtype=np.float32))
        encoder = dev.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for pipeline, bind_group, x, y, z in self._hot:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(x, y, z)
        compute.end()
        for t, buf in self.raw_out.items():
            encoder.copy_buffer_to_buffer(buf, 0, self.staging, self.out_offsets[t], buf.size)
        queue.submit([encoder.finish()])
        self.staging.map_async("READ_NOSYNC").sync_wait()
        try:
            data = np.frombuffer(self.staging.read_mapped(copy=False), np.float32)
            results = {}
            for t in self.outputs:
                shape = self.graph.tensors[t].shape
                n = int(np.prod(shape, dtype=np.int64))
                start = self.out_offsets[t] // 4
                results[t] = data[start:start + n].reshape(shape).copy()
        finally:
            self.staging.unmap()
        return results
