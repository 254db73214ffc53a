"""Running a planned graph (planning.py): its partitions compiled (GPU programs, CPU fallbacks, host-driven
WHILE / IF), host arrays crossing partition boundaries, everything else staying where it is."""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import numpy as np

from ..delegate.cpu_fallback import CpuProgram
from ..errors import AdapterError
from ..latency import devices
from ..latency.target import Target
from ..latency.target import check as check_target
from ..lowering.kernels.tuned import Tuned, TuningCache
from ..model.ir import Graph, Model
from ..options import EngineOptions
from ..planning import Plan, plan_graph
from .added_dispatch import AddedDispatch
from .control_flow import control_program
from .device import GpuDevice, device_for
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
            gpu = device_for(options)
    except AdapterError:
        return options
    fitted = TuningCache(options.workgroup_cache).tuned(gpu.cache_key()).latency
    return dataclasses.replace(options, latency_device=fitted or devices.for_target(gpu.target(options.target)))


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
                 plan: Plan | None = None) -> None:
        """model: where the subgraphs of WHILE / IF / composite ops are; plan: plan_graph's result when the caller
        has it already (a control-flow op's subgraphs, a shape seen before)."""
        start = time.perf_counter()
        self.source = graph
        self.options = options
        self.model = model
        self.plan = plan if plan is not None else plan_graph(graph, options, model)
        self.graph = self.plan.graph
        needs_gpu = any(p.device in ("gpu", "control") for p in self.plan.partitions)
        if gpu is None and needs_gpu:
            gpu = device_for(options)
        self.gpu = gpu
        self.target: Target | None = self.gpu.target(options.target) if self.gpu is not None else None
        # fp16 where asked and the adapter can (else fp32, with a warning); what GPU partitions run in
        self.precision = self.gpu.precision(options.precision) if self.gpu is not None else options.precision
        if tuned is None and self.gpu is not None:
            tuned = TuningCache(options.workgroup_cache).tuned(self.gpu.cache_key())
        self.programs: list[Any] = []  # GpuProgram, CpuProgram, control_flow.WhileProgram / IfProgram
        for part in self.plan.partitions:
            if part.device == "gpu":
                self.programs.append(GpuProgram(self.graph, part.ops, part.inputs, part.outputs, self.gpu,
                                                options, tuned, self.target, self.precision))
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
