"""WHILE and IF driven by the host, their subgraphs compiled for the GPU (DyCL: control flow as sub-networks that
run on the device while the host decides which runs next). planning.plan_control decides that an op runs so.

Each cond, body and branch subgraph is compiled like the main graph (runtime/graph.CompiledGraph: partitions,
GPU programs, CPU fallbacks, nested WHILE/IF), by the graph that holds the op, which hands the compiled subgraphs
to `control_program`. What the host does per op:

* WHILE whose cond and body are each one GPU program: the loop-carried tensors stay on the GPU (an int32 one, such
  as the loop counter TF2's while_loop adds, as float32: exact below 2^24, as every int32 tensor on the GPU). Two
  instances of the body program ping-pong between two sets of buffers: instance j reads set j and writes set
  1 - j, its inputs bound to the other instance's output buffers (GpuProgram.bind_input: no copy). Two instances
  of the cond read one set each. Per iteration the host submits the cond, reads its 4-byte result and submits the
  body without reading anything back. A loop variable the body passes through unchanged lives in one buffer of
  its own. The initial values are written once per invoke, the final ones read back once.
* any other WHILE (a body with a CPU partition, a nested WHILE/IF, loop variables neither float32 nor int32): each
  iteration runs the cond and the body graph with host arrays at their partition boundaries, as the main graph
  runs its partitions; `ControlPlan.resident` says why.
* IF: the host reads the condition and runs the chosen branch's compiled graph.

Every program keeps `timing` (ControlTiming) of its last run: how many decisions the host made (one per IF, one
per cond evaluation of a WHILE), the seconds they took and the seconds the chosen subgraphs ran. `gpuengine
profile` reports them per invoke.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..delegate.partition import Partition
from ..model.ir import Graph, Op
from ..planning import ControlPlan, Plan
from .device import DEVICE_LOST, GpuDevice
from .program import GpuProgram


class Compiled(Protocol):
    """What the programs here use of a compiled subgraph (runtime/graph.CompiledGraph, which imports this module
    and hands them their subgraphs compiled)."""

    source: Graph  # the subgraph as called: its inputs are the op's
    graph: Graph  # as planned: its outputs are the op's
    gpu: GpuDevice | None

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]: ...

    @property
    def gpu_programs(self) -> list[GpuProgram]: ...

    @property
    def all_gpu_programs(self) -> list[GpuProgram]: ...


def control_program(graph: Graph, part: Partition, plan: ControlPlan,
                    compiled: dict[str, Compiled]) -> WhileProgram | IfProgram:
    """The program of a WHILE / IF partition; `compiled`: its subgraphs compiled, by role (cond, body / then,
    else)."""
    op = graph.ops[part.ops[0]]
    cls = WhileProgram if op.code == "WHILE" else IfProgram
    return cls(graph, op, part, plan, compiled)


@dataclass
class ControlTiming:
    """What the host spent on one run of a WHILE / IF. decide_s: deciding what runs next: for an IF reading the
    condition (already on the host, read back with the partition that computed it) and picking the branch and its
    feeds; for a WHILE each cond evaluation (running the cond subgraph, on the GPU where it can, and reading its
    flag back). run_s: running the chosen branch / the body iterations and reading the loop's results back."""

    decisions: int = 0
    decide_s: float = 0.0
    run_s: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {"decisions": self.decisions, "decide_ms": self.decide_s * 1e3, "run_ms": self.run_s * 1e3}


def _truthy(value: Any) -> bool:
    return bool(np.asarray(value).reshape(-1)[0])


class _HostDriven:
    """What WHILE and IF share: the subgraphs compiled, inputs taken from the values or the graph's constants."""

    def __init__(self, graph: Graph, op: Op, part: Partition, plan: ControlPlan,
                 compiled: dict[str, Compiled]) -> None:
        self.graph, self.op, self.part, self.plan = graph, op, part, plan
        self.compiled = compiled
        self.timing = ControlTiming()  # of the last run

    def _value(self, values: dict[int, np.ndarray], t: int) -> np.ndarray:
        if t in values:
            return np.asarray(values[t])
        return np.asarray(self.graph.tensors[t].data)

    @property
    def gpu_programs(self) -> list[GpuProgram]:
        """Every GPU program of the subgraphs (nested ones included), for reports."""
        return [p for c in self.compiled.values() for p in c.all_gpu_programs]

    @property
    def dispatches(self) -> int:
        return sum(len(p.dispatches) for p in self.gpu_programs)


class IfProgram(_HostDriven):
    """IF: the host reads the condition and runs the chosen branch's compiled graph."""

    taken = ""  # the branch the last run took

    def run(self, values: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        start = time.perf_counter()
        role = "then" if _truthy(self._value(values, self.op.inputs[0])) else "else"
        self.taken = role
        branch = self.compiled[role]
        feeds = {t: self._value(values, outer) for outer, t in zip(self.op.inputs[1:], branch.source.inputs)}
        decided = time.perf_counter()
        out = branch.run(feeds)
        self.timing = ControlTiming(1, decided - start, time.perf_counter() - decided)
        return {outer: out[t] for outer, t in zip(self.op.outputs, branch.graph.outputs)}


class WhileProgram(_HostDriven):
    """WHILE: the host evaluates the cond and runs the body until the cond is false (see the module docstring)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.iterations = 0  # of the last run
        self._loop: _ResidentLoop | None = None
        if self.plan.resident is None:
            self._loop = _ResidentLoop(self.compiled["cond"], self.compiled["body"], self.plan)

    def run(self, values: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        state = [self._value(values, t) for t in self.op.inputs]
        start = time.perf_counter()
        self.timing = ControlTiming()
        final = self._loop.run(state, self.timing) if self._loop is not None else self._run_on_host(state)
        if self._loop is not None:
            self.iterations = self._loop.iterations
        self.timing.run_s = time.perf_counter() - start - self.timing.decide_s
        return dict(zip(self.op.outputs, final))

    def _run_on_host(self, state: list[np.ndarray]) -> list[np.ndarray]:
        cond, body = self.compiled["cond"], self.compiled["body"]
        self.iterations = 0
        while True:
            start = time.perf_counter()
            flag = cond.run(dict(zip(cond.source.inputs, state)))[cond.graph.outputs[0]]
            go_on = _truthy(flag)
            self.timing.decisions += 1
            self.timing.decide_s += time.perf_counter() - start
            if not go_on:
                return state
            out = body.run(dict(zip(body.source.inputs, state)))
            state = [np.asarray(out[t]) for t in body.graph.outputs]
            self.iterations += 1


class _ResidentLoop:
    """The ping-pong loop of a WHILE whose cond and body are each one GPU program (module docstring)."""

    def __init__(self, cond: Compiled, body: Compiled, plan: ControlPlan) -> None:
        import wgpu

        self.gpu = body.gpu
        assert self.gpu is not None
        bodies = [body.gpu_programs[0], _twin(body, plan.plans["body"])]
        conds = [cond.gpu_programs[0], _twin(cond, plan.plans["cond"])]
        graph, cond_graph = body.graph, cond.graph
        self.result = cond_graph.outputs[0]
        self.iterations = 0
        self.bodies, self.conds = bodies, conds
        # slot k: its buffer in set 0 and set 1; a variable the body passes through has one buffer of its own
        self.outputs = list(graph.outputs)
        self.dtypes = [graph.tensors[t].dtype for t in graph.inputs]
        self.own: dict[int, Any] = {}
        buffers: list[list[Any]] = [[], []]
        for k, (t_in, t_out) in enumerate(zip(graph.inputs, graph.outputs)):
            if t_out == t_in:
                size = max(16, -(-graph.tensors[t_in].size * 4 // 16) * 16)
                self.own[k] = self.gpu.device.create_buffer(
                    size=size, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
                buffers[0].append(self.own[k])
                buffers[1].append(self.own[k])
            else:
                buffers[0].append(bodies[1].output_buffer(t_out))  # instance 1 writes set 0
                buffers[1].append(bodies[0].output_buffer(t_out))  # instance 0 writes set 1
        for j in (0, 1):
            for k, t in enumerate(graph.inputs):
                if t in bodies[j].inputs:
                    bodies[j].bind_input(t, buffers[j][k])
            for k, t in enumerate(cond_graph.inputs):
                if t in conds[j].inputs:
                    conds[j].bind_input(t, buffers[j][k])

    def run(self, state: list[np.ndarray], timing: ControlTiming) -> list[np.ndarray]:

        for k, value in enumerate(state):  # the initial values: set 0
            if k in self.own:
                if not self.gpu.alive():
                    raise RuntimeError(DEVICE_LOST)
                self.gpu.device.queue.write_buffer(self.own[k], 0, np.ascontiguousarray(value, np.float32))
            else:
                self.bodies[1].write_output(self.outputs[k], value)
        current, last = 0, None
        self.iterations = 0
        while True:
            if not self.gpu.alive():  # every input is bound, so no upload would find out before a submit
                raise RuntimeError(DEVICE_LOST)
            start = time.perf_counter()
            flag = self.conds[current].run({})[self.result]
            go_on = _truthy(flag)
            timing.decisions += 1
            timing.decide_s += time.perf_counter() - start
            if not go_on:
                break
            self.bodies[current].submit({}, read=False)
            last, current = current, 1 - current
            self.iterations += 1
        if last is None:
            return state
        values = self.bodies[last].read_outputs()
        # an int32 loop variable (a TF2 loop counter) is carried as float32, as every int32 tensor on the GPU
        return [state[k] if k in self.own else np.asarray(values[t]).astype(self.dtypes[k], copy=False)
                for k, t in enumerate(self.outputs)]


def _twin(compiled: Compiled, plan: Plan) -> GpuProgram:
    """A second instance of a graph's one GPU program: same kernels (pipelines are shared by WGSL text), buffers
    of its own."""
    first = compiled.gpu_programs[0]
    part = plan.partitions[0]
    return GpuProgram(plan.graph, part.ops, part.inputs, part.outputs, first.gpu, first.options,
                      first.choices.tuned, first.target, first.precision)


__all__ = ["ControlTiming", "IfProgram", "WhileProgram", "control_program"]
