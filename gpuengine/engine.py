"""One subgraph compiled for execution: passes -> support -> partitions -> GPU programs and CPU fallbacks."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .delegate.cpu_fallback import CpuProgram
from .delegate.partition import Partition, partition
from .delegate.support import gpu_support, unsupported_summary
from .kernels.base import KernelSpec
from .model.ir import Graph
from .passes.pipeline import run_passes
from .runtime.device import GpuDevice, get_device
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
        self.gpu = gpu or (get_device(options.adapter) if needs_gpu else None)
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
        return {t: values[t] if t in values else self.constants[t] for t in self.graph.outputs}

    @property
    def gpu_programs(self) -> list[GpuProgram]:
        return [p for p in self.programs if isinstance(p, GpuProgram)]

    @property
    def tuned_dispatches(self) -> int:
        return sum(p.tuned for p in self.gpu_programs)

    @property
    def dispatches(self) -> int:
        return sum(len(p.dispatches) for p in self.gpu_programs)
