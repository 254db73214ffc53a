"""Running a planned graph (planning.py): its partitions compiled (GPU programs, CPU fallbacks, host-driven
WHILE / IF), host arrays crossing partition boundaries, everything else staying where it is."""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import numpy as np

from ..delegate.cpu_fallback import CpuProgram
from ..errors import AdapterError, GpuEngineError
from ..latency import devices
from ..latency.target import Target
from ..latency.target import check as check_target
from ..lowering import codegen
from ..lowering.device_fit import variant_notes
from ..lowering.kernels.tuned import Tuned, TuningCache
from ..lowering.parametric import hoist, unbaked
from ..model.ir import Graph, Model
from ..options import EngineOptions
from ..planning import Plan, plan_graph
from .added_dispatch import AddedDispatch
from .control_flow import control_program
from .device import GpuDevice, device_of
from .program import GpuProgram


def for_adapter(options: EngineOptions) -> EngineOptions:
    """The options with the latency description of the adapter the interpreter will run on (its fit from
    `gpuengine calibrate` where the class is its own, else its class's built-in one); unchanged where a target
    class is named (planning_device takes it) or no adapter opens (the plan then runs on LiteRT, or fails later
    with the adapter's error)."""
    if options.latency_device is not None or check_target(options.target) != "auto":
        return options
    try:
        with warnings.catch_warnings():  # a software adapter's warning comes once, when the plan compiles on it
            warnings.simplefilter("ignore", RuntimeWarning)
            gpu = device_of(options)
    except AdapterError:
        return options
    fitted = TuningCache(options.workgroup_cache).tuned(gpu.cache_key()).latency
    return dataclasses.replace(options, latency_device=fitted or devices.for_target(gpu.target(options.target)))


def seed_parametric(plan: Plan, probes: list[Plan], gpu: GpuDevice, options: EngineOptions, tuned: Tuned | None,
                    target: Target | None, precision: str) -> int:
    """Each GPU dispatch rendered at the run's sizes and at the probes' (in the run's decomposition and workgroup
    size); where the texts differ only in numbers, the kernel's parametric version is registered on the device
    (lowering/parametric.py). Returns how many."""
    limit = int(gpu.limits.get("max-storage-buffers-per-shader-stage", 8))

    def dry(p: Plan, part: Any) -> GpuProgram | None:
        try:
            return GpuProgram(p.graph, part.ops, part.inputs, part.outputs, gpu, options, tuned, target, precision,
                              allocate=False)
        except (GpuEngineError, ValueError):  # the probe's sizes do not plan: no parametric versions from it
            return None

    made = 0
    for k, ours in enumerate(plan.partitions):
        first = dry(plan, ours) if ours.device == "gpu" else None
        if first is None:
            continue
        others = []
        for probe in probes:
            if len(probe.partitions) == len(plan.partitions) and probe.partitions[k].device == "gpu" \
                    and len(probe.partitions[k].ops) == len(ours.ops):
                got = dry(probe, probe.partitions[k])
                if got is not None and len(got.sources) == len(first.sources):
                    others.append(got)
        for d, (spec, text) in enumerate(first.sources):
            versions = gpu.parametric.setdefault(spec.shader, [])
            # a version per decomposition the policy picked at these sizes (SoD²'s shape classes: skinny, regular
            # and fat sizes may want different tiles), each compiled now so a later size compiles nothing
            picked = [spec.decomposition] + [o.sources[d][0].decomposition for o in others
                                             if o.sources[d][0].shader == spec.shader]
            for decomposition in list(dict.fromkeys(picked)) if others else []:
                if any(v.decomposition == decomposition and v.values(text) is not None for v in versions):
                    continue
                for unbake in (False, True):
                    if unbake and unbaked(spec) is None:
                        continue
                    made_kernel = _hoisted(first, spec, [(o, o.sources[d][0]) for o in others], precision, limit,
                                           unbake, decomposition)
                    if made_kernel is not None:
                        kernel, version = made_kernel
                        if first.compile_parametric(kernel, version):
                            versions.append(kernel)
                            made += 1
                        break
    return made


def _hoisted(first: GpuProgram, spec: Any, others: list[tuple[GpuProgram, Any]], precision: str, limit: int,
             unbake: bool, decomposition: Any) -> tuple[Any, Any] | None:
    """The parametric kernel of `spec` against the probes' specs of the same dispatch, all put in `decomposition`
    and one workgroup size (with their small constants in buffers where `unbake`), and the run's spec so put."""
    fixed = tuple(spec.workgroup) if decomposition is None else None
    ours = first.as_version(spec, decomposition, fixed, unbake)
    if ours is None or len(codegen.bound(ours)) + 1 > limit:
        return None
    texts = []
    for program, other in others:
        if other.shader != spec.shader:
            continue
        version = program.as_version(other, decomposition, tuple(ours.workgroup), unbake)
        if version is not None:
            texts.append(program.render(version))
    kernel = hoist(spec.shader, tuple(ours.workgroup), decomposition, first.render(ours), texts,
                   len(codegen.bound(ours)))
    if kernel is None:
        return None
    kernel.unbaked = unbake
    return kernel, ours


class InvokeJob:
    """An invoke in flight (Interpreter.invoke_async): `result()` blocks for the outputs (a dict of output tensor
    index to numpy array; {} when they stayed on the GPU), `done()` tells without blocking."""

    def __init__(self, graph: CompiledGraph, submitted: Any, read: bool,
                 results: dict[int, np.ndarray] | None = None) -> None:
        self._graph, self._submitted, self._read = graph, submitted, read
        self._results = results if read or results is None else {}

    def done(self) -> bool:
        return self._results is not None or self._graph.programs[0].done(self._submitted)

    def result(self) -> dict[int, np.ndarray]:
        if self._results is None:
            outputs = self._graph.programs[0].collect(self._submitted)
            self._results = self._graph.outputs_of(outputs) if self._read else {}
        return self._results


class CompiledGraph:
    """Runs a planned graph: host arrays cross partition boundaries, everything else stays where it is."""

    def __init__(self, graph: Graph, options: EngineOptions, num_threads: int | None = None,
                 gpu: GpuDevice | None = None, tuned: Tuned | None = None, model: Model | None = None,
                 plan: Plan | None = None, probes: list[Plan] | None = None) -> None:
        """model: where the subgraphs of WHILE / IF / composite ops are; plan: plan_graph's result when the caller
        has it already (a control-flow op's subgraphs, a shape seen before); probes: the same graph planned at other
        sizes of its symbolic dimensions, from which its kernels' parametric versions are made first
        (lowering/parametric.py: later sizes then compile nothing)."""
        start = time.perf_counter()
        self.source = graph
        self.options = options
        self.model = model
        self.plan = plan if plan is not None else plan_graph(graph, options, model)
        self.graph = self.plan.graph
        needs_gpu = any(p.device in ("gpu", "control") for p in self.plan.partitions)
        if gpu is None and needs_gpu:
            gpu = device_of(options)
        self.gpu = gpu
        self.target: Target | None = self.gpu.target(options.target) if self.gpu is not None else None
        # fp16 where asked and the adapter can (else fp32, with a warning); what GPU partitions run in
        self.precision = self.gpu.precision(options.precision) if self.gpu is not None else options.precision
        if tuned is None and self.gpu is not None:
            tuned = TuningCache(options.workgroup_cache).tuned(self.gpu.cache_key())
        # the model's inputs have -1 sizes: its dispatches may run the device's parametric kernels
        # (lowering/parametric.py)
        main = model.main if model is not None else graph
        self.symbolic_inputs = any(any(d < 0 for d in main.tensors[t].shape_signature or ()) for t in main.inputs)
        self.parametric_kernels = 0
        if probes and self.gpu is not None:
            self.parametric_kernels = seed_parametric(self.plan, probes, self.gpu, options, tuned, self.target,
                                                      self.precision)
        self.programs: list[Any] = []  # GpuProgram, CpuProgram, control_flow.WhileProgram / IfProgram
        for part in self.plan.partitions:
            if part.device == "gpu":
                sparse = [(m.block, m.patch, float(options.sparse_blocks or 0.0), m.pixels)
                          for i, m in sorted(self.plan.sparse.items()) if i in part.ops]
                self.programs.append(GpuProgram(self.graph, part.ops, part.inputs, part.outputs, self.gpu,
                                                options, tuned, self.target, self.precision,
                                                parametric=self.symbolic_inputs, sparse=sparse or None))
            elif part.device == "control":
                control = self.plan.control[part.ops[0]]
                compiled = {role: CompiledGraph(control.graphs[role], options, num_threads, gpu=self.gpu, tuned=tuned,
                                                model=model, plan=control.plans[role])
                            for role in control.graphs}
                self.programs.append(control_program(self.graph, part, control, compiled))
            else:
                self.programs.append(CpuProgram(self.graph, part, num_threads, model))
        # Constants that are outputs (or pass straight through) are served from the host.
        self.constants = {t.index: np.asarray(t.data) for t in self.graph.tensors if t.data is not None}
        self.compile_ms = (time.perf_counter() - start) * 1e3

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        values: dict[int, np.ndarray] = dict(feeds)
        for program in self.programs:
            values.update(program.run(values))
        return self.outputs_of(values)

    def outputs_of(self, values: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """The graph's outputs from the values its programs computed (constant outputs from the host)."""
        return {t: values[t] if t in values else self.constants[t] for t in self.graph.outputs}

    def submit(self, feeds: dict[int, np.ndarray], read: bool = True) -> InvokeJob:
        """An invoke that runs while the caller goes on (a model that is one GPU program); a model with CPU
        partitions runs them on the host in between, so it is run to the end here."""
        program = self.sole_gpu_program
        if program is not None:
            return InvokeJob(self, program.submit(feeds, read, track=True), read)
        return InvokeJob(self, None, read, self.run(feeds))

    @property
    def sole_gpu_program(self) -> GpuProgram | None:
        """The graph's program when it is one GPU program (no CPU partition, no host-driven control flow): its
        invokes can be submitted and overlapped, its buffers bound, dispatches added after it."""
        if len(self.programs) == 1 and isinstance(self.programs[0], GpuProgram):
            return self.programs[0]
        return None

    @property
    def device(self) -> Any:
        """The wgpu device the graph's GPU programs run on (None when everything runs on the CPU)."""
        return self.gpu.device if self.gpu is not None else None

    def add_dispatch(self, source: str, buffers: list[Any]) -> AddedDispatch:
        """A dispatch of WGSL `source` (a kernel module's, such as lowering/kernels/sampler.py) compiled on this graph's
        device and bound to `buffers`, to submit after an invoke (GpuProgram.submit(after=...))."""
        if self.gpu is None:
            raise ValueError("this graph runs on the CPU: there is no GPU to add a dispatch to")
        return AddedDispatch(self.gpu, source, buffers)

    @property
    def gpu_programs(self) -> list[GpuProgram]:
        return [p for p in self.programs if isinstance(p, GpuProgram)]

    @property
    def control_programs(self) -> list[Any]:
        """The WHILE / IF ops the host drives."""
        return [p for p in self.programs if hasattr(p, "compiled")]

    @property
    def all_gpu_programs(self) -> list[GpuProgram]:
        """The GPU programs of this graph and of the subgraphs its WHILE / IF ops run (for reports)."""
        return self.gpu_programs + [q for p in self.control_programs for q in p.gpu_programs]

    def variant_notes(self) -> list[str]:
        """What the device's features changed in the kernel choice (lowering/device_fit.py variant_notes)."""
        if self.gpu is None:
            return []
        specs = [d.spec for p in self.all_gpu_programs for d in p.dispatches]
        return variant_notes(specs, self.gpu.device_limits)

    @property
    def f32_tensors(self) -> int:
        """Stored tensors an fp16 program keeps in f32 (mixed precision, EngineOptions.f32_tensors)."""
        return sum(len(p.f32) for p in self.all_gpu_programs)

    @property
    def tuned_dispatches(self) -> int:
        return sum(p.tuned for p in self.gpu_programs)

    @property
    def dispatches(self) -> int:
        return sum(len(p.dispatches) for p in self.gpu_programs)
