"""One subgraph compiled for execution: passes -> support -> partitions -> GPU programs and CPU fallbacks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .delegate.cpu_fallback import CpuProgram
from .delegate.partition import Partition, partition
from .delegate.support import gpu_support, unsupported_summary
from .kernels.base import KernelSpec
from .model.ir import Graph
from .model.validate import validate_graph
from .passes.pipeline import run_passes
from .runtime.device import GpuDevice, get_device, gpu_for
from .runtime.program import Choices, EngineOptions, GpuProgram, partition_specs
from .tuning.cache import Tuned, TuningCache
from .tuning.target import Target


@dataclass
class Plan:
    """What the engine decided for a graph, before touching the GPU (inspect uses this alone)."""

    graph: Graph
    support: dict[int, str | None]
    partitions: list[Partition]
    unsupported: dict[str, str] = field(default_factory=dict)

    @property
    def ops_gpu(self) -> int:
        return sum(len(p.ops) for p in self.partitions if p.device == "gpu")


def plan_graph(graph: Graph, options: EngineOptions) -> Plan:
    validate_graph(graph)  # every graph the engine compiles (resized, a signature's) is checked op by op first
    optimized = run_passes(graph, options.optimize)
    support = gpu_support(optimized)
    return Plan(optimized, support, partition(optimized, support), unsupported_summary(optimized, support))


def planned_dispatches(graph: Graph, options: EngineOptions, target: Target) -> tuple[Plan, list[list[KernelSpec]]]:
    """The plan and the dispatches of every GPU partition as they would be decomposed for `target` on an adapter
    without a tuning cache, computed without touching a GPU (nothing is compiled)."""
    plan = plan_graph(graph, options)
    choices = Choices(target)
    return plan, [partition_specs(plan.graph, p.ops, p.inputs, p.outputs, options.optimize, choices)[0]
                  for p in plan.partitions if p.device == "gpu"]


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
            self._results = self._graph._outputs(outputs) if self._read else {}
        return self._results


class CompiledGraph:
    """Runs a planned graph: host arrays cross partition boundaries, everything else stays where it is."""

    def __init__(self, graph: Graph, options: EngineOptions, num_threads: int | None = None,
                 gpu: GpuDevice | None = None, tuned: Tuned | None = None) -> None:
        start = time.perf_counter()
        self.source = graph
        self.options = options
        self.plan = plan_graph(graph, options)
        self.graph = self.plan.graph
        needs_gpu = any(p.device == "gpu" for p in self.plan.partitions)
        if gpu is None and needs_gpu:
            gpu = gpu_for(options.device) if options.device is not None else get_device(options.adapter)
        self.gpu = gpu
        self.target: Target | None = self.gpu.target(options.target) if self.gpu is not None else None
        # fp16 where asked and the adapter can (else fp32, with a warning); what GPU partitions run in
        self.precision = self.gpu.precision(options.precision) if self.gpu is not None else options.precision
        if tuned is None and self.gpu is not None:
            tuned = TuningCache(options.workgroup_cache).tuned(self.gpu.cache_key())
        self.programs: list[GpuProgram | CpuProgram] = []
        for part in self.plan.partitions:
            if part.device == "gpu":
                self.programs.append(GpuProgram(self.graph, part.ops, part.inputs, part.outputs, self.gpu,
                                                options, tuned, self.target, self.precision))
            else:
                self.programs.append(CpuProgram(self.graph, part, num_threads))
        # Constants that are outputs (or pass straight through) are served from the host.
        self.constants = {t.index: np.asarray(t.data) for t in self.graph.tensors if t.data is not None}
        self.compile_ms = (time.perf_counter() - start) * 1e3

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        values: dict[int, np.ndarray] = dict(feeds)
        for program in self.programs:
            values.update(program.run(values))
        return self._outputs(values)

    def _outputs(self, values: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        return {t: values[t] if t in values else self.constants[t] for t in self.graph.outputs}

    def submit(self, feeds: dict[int, np.ndarray], read: bool = True) -> InvokeJob:
        """An invoke that runs while the caller goes on (a model that is one GPU program); a model with CPU
        partitions runs them on the host in between, so it is run to the end here."""
        if len(self.programs) == 1 and isinstance(self.programs[0], GpuProgram):
            return InvokeJob(self, self.programs[0].submit(feeds, read, track=True), read)
        return InvokeJob(self, None, read, self.run(feeds))

    @property
    def gpu_programs(self) -> list[GpuProgram]:
        return [p for p in self.programs if isinstance(p, GpuProgram)]

    @property
    def tuned_dispatches(self) -> int:
        return sum(p.tuned for p in self.gpu_programs)

    @property
    def dispatches(self) -> int:
        return sum(len(p.dispatches) for p in self.gpu_programs)
