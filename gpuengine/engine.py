"""One subgraph compiled for execution: passes -> support -> partitions -> GPU programs and CPU fallbacks."""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .control_flow import CONTROL_OPS, ControlPlan, control_program, float_if_conditions, plan_control
from .delegate.cpu_fallback import CpuProgram
from .delegate.partition import Partition, partition
from .delegate.support import gpu_support, unsupported_summary
from .errors import AdapterError
from .kernels.base import KernelSpec
from .kernels.tuned import Tuned, TuningCache
from .latency import devices
from .latency.latency import Device
from .latency.target import Target
from .latency.target import check as check_target
from .model.ir import Graph, Model
from .model.shapes import propagate, shape_key
from .model.validate import validate_graph
from .passes.pipeline import run_passes
from .runtime.device import GpuDevice, get_device, gpu_for
from .runtime.program import Choices, EngineOptions, GpuProgram, partition_specs


@dataclass
class Plan:
    """What the engine decided for a graph, before touching the GPU (inspect uses this alone)."""

    graph: Graph
    support: dict[int, str | None]
    partitions: list[Partition]
    unsupported: dict[str, str] = field(default_factory=dict)
    control: dict[int, ControlPlan] = field(default_factory=dict)  # WHILE / IF ops the host drives, by op index

    @property
    def ops_gpu(self) -> int:
        """Ops in GPU partitions, and the WHILE / IF ops the host drives (their subgraphs run on the GPU)."""
        return sum(len(p.ops) for p in self.partitions if p.device in ("gpu", "control"))


def plan_graph(graph: Graph, options: EngineOptions, model: Model | None = None) -> Plan:
    """Validate, transform, decide per op where it runs and partition. `model`: the model the graph belongs to,
    where the subgraphs of its WHILE / IF ops are (without it they run on LiteRT, which needs them too)."""
    validate_graph(graph)  # every graph the engine compiles (resized, a signature's) is checked op by op first
    optimized = run_passes(graph, options.optimize, model, planning_device(options), options.hybrid_arithmetic)
    planned = {i: plan_control(op, optimized, model, options) for i, op in enumerate(optimized.ops)
               if op.code in CONTROL_OPS}
    optimized, moved = float_if_conditions(optimized, [i for i, p in planned.items()
                                                       if isinstance(p, ControlPlan) and p.kind == "IF"])
    support = gpu_support(optimized)
    control: dict[int, ControlPlan] = {}
    for old, got in planned.items():
        i = moved[old]
        if isinstance(got, str):
            support[i] = f"{optimized.ops[i].code} on LiteRT: {got}"
        else:
            support[i], control[i] = None, got
    return Plan(optimized, support, partition(optimized, support, set(control)),
                unsupported_summary(optimized, support), control)


def planning_device(options: EngineOptions) -> Device:
    """The latency model's description of the device a plan is for: the one the options carry (the interpreter
    sets the adapter's, engine.for_adapter), else the built-in one of the target class asked for (options.target,
    env GPUENGINE_TARGET), else of a discrete GPU."""
    if options.latency_device is not None:
        return options.latency_device
    choice = check_target(options.target)
    return devices.for_target("discrete" if choice == "auto" else choice)


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
            gpu = gpu_for(options.device) if options.device is not None else get_device(options.adapter)
    except AdapterError:
        return options
    fitted = TuningCache(options.workgroup_cache).tuned(gpu.cache_key()).latency
    return dataclasses.replace(options, latency_device=fitted or devices.for_target(gpu.target(options.target)))


@dataclass
class ShapeEntry:
    """What allocate_tensors needs for one set of input shapes, before touching a GPU: the graph with every shape
    derived (model/shapes.py) and its plan. Compiled kernels are cached apart, by WGSL text on the device."""

    graph: Graph
    plan: Plan
    runtime: dict[int, str]  # tensors whose shape only a run tells, and why (their ops run on LiteRT)


class ShapeCache:
    """Plans per input-shape signature, least recently used dropped beyond `capacity`. Going back to input shapes
    seen before derives and plans nothing; its kernels are still compiled on the device (pipelines by WGSL text)
    and its memory plans memoized (memory.plan_memory), so it compiles nothing either."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity, self.hits, self.misses = capacity, 0, 0
        self._entries: OrderedDict[Any, ShapeEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> ShapeEntry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return entry

    def put(self, key: Any, entry: ShapeEntry) -> None:
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def report(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._entries)}


def prepare(graph: Graph, shapes: dict[int, tuple[int, ...]], options: EngineOptions, model: Model | None,
            cache: ShapeCache | None = None) -> ShapeEntry:
    """The graph's shapes derived for these input shapes and its plan, from the cache when seen before. A graph
    without dynamic dimensions at its declared shapes is taken as it is."""
    key = shape_key(shapes)
    entry = cache.get(key) if cache is not None else None
    if entry is not None:
        return entry
    declared = all(tuple(graph.tensors[t].shape) == tuple(s) for t, s in shapes.items())
    dynamic = any(t.shape_signature is not None and any(d < 0 for d in t.shape_signature) for t in graph.tensors)
    if declared and not dynamic:
        derived, runtime = graph, {}
    else:
        done = propagate(graph, shapes, model)
        derived, runtime = done.graph, done.runtime
    plan = plan_graph(derived, options, model)
    if runtime:
        _name_runtime_shapes(plan, runtime)
    entry = ShapeEntry(derived, plan, runtime)
    if cache is not None:
        cache.put(key, entry)
    return entry


def _name_runtime_shapes(plan: Plan, runtime: dict[int, str]) -> None:
    """Ops left to LiteRT for a shape only a run tells say which and why (instead of a bare 'dynamic shape')."""
    for i, reason in plan.support.items():
        if reason is None or not reason.startswith("dynamic shape"):
            continue
        op = plan.graph.ops[i]
        known = [t for t in [*op.inputs, *op.outputs] if t in runtime]
        if known:
            t = known[0]
            plan.support[i] = f"the shape of {plan.graph.tensors[t].name!r} is known only at run time ({runtime[t]})"
    plan.unsupported = unsupported_summary(plan.graph, plan.support)


def planned_dispatches(graph: Graph, options: EngineOptions, target: Target, model: Model | None = None,
                       ) -> tuple[Plan, list[list[KernelSpec]]]:
    """The plan and the dispatches of every GPU partition as they would be decomposed for `target` on an adapter
    without a tuning cache, computed without touching a GPU (nothing is compiled). model: where the graph's
    composites' decompositions are (a signature's subgraph)."""
    if options.latency_device is None:  # fusions decided for the target's class too
        options = dataclasses.replace(options, latency_device=devices.for_target(target))
    plan = plan_graph(graph, options, model)
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
            gpu = gpu_for(options.device) if options.device is not None else get_device(options.adapter)
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
                self.programs.append(control_program(self.graph, part, self.plan.control[part.ops[0]], model,
                                                     options, self.gpu, tuned, num_threads))
            else:
                self.programs.append(CpuProgram(self.graph, part, num_threads, model))
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
