"""WHILE and IF driven by the host, their subgraphs compiled for the GPU (DyCL: control flow as sub-networks that
run on the device while the host decides which runs next).

Each cond, body and branch subgraph is compiled like the main graph (engine.CompiledGraph: passes, partitions,
GPU programs, CPU fallbacks, nested WHILE/IF). What the host does per op:

* WHILE whose cond and body are each one GPU program: the loop-carried tensors stay on the GPU. Two instances of
  the body program ping-pong between two sets of buffers: instance j reads set j and writes set 1 - j, its inputs
  bound to the other instance's output buffers (GpuProgram.bind_input: no copy). Two instances of the cond read
  one set each. Per iteration the host submits the cond, reads its 4-byte result and submits the body without
  reading anything back. A loop variable the body passes through unchanged lives in one buffer of its own. The
  initial values are written once per invoke, the final ones read back once.
* any other WHILE (a body with a CPU partition, a nested WHILE/IF, loop variables that are not float32): each
  iteration runs the cond and the body graph with host arrays at their partition boundaries, as the main graph
  runs its partitions; `ControlPlan.resident` says why.
* IF: the host reads the condition and runs the chosen branch's compiled graph.

The cond's bool result becomes float 1.0 / 0.0 through an added SELECT_V2 (`float_condition`), so the comparison
computing it runs on the GPU, whose programs exchange floats.

A WHILE or IF none of whose subgraphs has an op for the GPU stays with LiteRT: the CPU fallback's sub-model
carries the subgraphs it calls (delegate/cpu_fallback.py). So does one whose loop variables change shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tflite.BuiltinOperator import BuiltinOperator

from .errors import GpuEngineError
from .model.builder import make_options
from .model.ir import Graph, Model, Op, Tensor

if TYPE_CHECKING:
    from .delegate.partition import Partition
    from .engine import CompiledGraph, Plan
    from .kernels.tuned import Tuned
    from .runtime.device import GpuDevice
    from .runtime.program import EngineOptions, GpuProgram

CONTROL_OPS = frozenset({"WHILE", "IF"})
ROLES = {"WHILE": ("cond", "body"), "IF": ("then", "else")}


@dataclass
class ControlPlan:
    """How a WHILE or IF runs: its subgraphs (model indices), the graphs compiled for them and their plans."""

    kind: str
    subgraphs: dict[str, int]
    graphs: dict[str, Graph]
    plans: dict[str, Plan]
    resident: str | None = None  # WHILE: None when loop-carried tensors stay on the GPU, else why they do not

    def report(self) -> dict[str, Any]:
        """What inspect shows: per subgraph its partitions; for a loop, where the loop-carried tensors live."""
        out: dict[str, Any] = {"op": self.kind, "subgraphs": {}}
        for role, plan in self.plans.items():
            out["subgraphs"][role] = {
                "index": self.subgraphs[role], "ops": len(plan.graph.ops), "ops_gpu": plan.ops_gpu,
                "partitions": [partition_report(plan, p) for p in plan.partitions]}
        if self.kind == "WHILE":
            out["loop_carried"] = "gpu (ping-pong buffers)" if self.resident is None else f"host: {self.resident}"
        return out


def describe_control(plan: ControlPlan) -> str:
    """One line for Interpreter.describe(): the op, its subgraphs' partitions, where loop variables live."""
    parts = []
    for role, sub in plan.plans.items():
        kinds = ", ".join(f"{p.device if p.device != 'control' else 'host-driven ' + sub.graph.ops[p.ops[0]].code}"
                          f" ({len(p.ops)} ops)" for p in sub.partitions) or "no ops"
        parts.append(f"{role} subgraph {plan.subgraphs[role]}: {kinds}")
    text = f"{plan.kind}: " + "; ".join(parts)
    if plan.kind == "WHILE":
        text += ("; loop-carried tensors on the GPU (ping-pong buffers)" if plan.resident is None
                 else f"; loop-carried tensors cross the host ({plan.resident})")
    return text


def partition_report(plan: Plan, p: Partition) -> dict[str, Any]:
    """One partition as inspect lists it; a WHILE/IF is a GPU partition the host drives, with its subgraphs."""
    ops = [plan.graph.ops[i].code for i in p.ops]
    if p.device != "control":
        return {"device": p.device, "ops": ops}
    return {"device": "gpu", "driver": "host", "ops": ops, **plan.control[p.ops[0]].report()}


def called(op: Op) -> dict[str, int | None]:
    """role -> subgraph index of a WHILE (cond, body) or IF (then, else)."""
    return {role: op.opt(f"{role}_subgraph_index") for role in ROLES[op.code]}


def _as_float(g: Graph, flag: int) -> tuple[int, Op]:
    """A new float32 tensor equal to the bool tensor `flag` as 1.0 / 0.0 and the SELECT_V2 op computing it (not
    yet placed in g.ops): a comparison read by a select runs on the GPU, and the host reads one float."""

    def add(name: str, shape: tuple[int, ...], data: np.ndarray | None) -> int:
        g.tensors.append(Tensor(index=len(g.tensors), name=name, shape=shape, dtype=np.dtype(np.float32), data=data))
        return len(g.tensors) - 1

    t = g.tensors[flag]
    one = add(f"{t.name}_true", (), np.array(1.0, np.float32))
    zero = add(f"{t.name}_false", (), np.array(0.0, np.float32))
    out = add(f"{t.name}_as_float", tuple(t.shape), None)
    return out, Op(index=-1, code="SELECT_V2", inputs=[flag, one, zero], outputs=[out],
                   options=make_options("SELECT_V2", None), builtin_code=BuiltinOperator.SELECT_V2)


def float_if_conditions(graph: Graph, ifs: list[int]) -> tuple[Graph, dict[int, int]]:
    """The graph with each IF in `ifs` (op indices; IFs the host drives) reading its condition as a float computed
    right before it, when an op computes the bool: that op can then run on the GPU. Returns the graph and the map
    old op index -> new op index."""
    producers = graph.producers()
    targets = {i for i in ifs if graph.tensors[graph.ops[i].inputs[0]].dtype == np.bool_
               and graph.ops[i].inputs[0] in producers}
    if not targets:
        return graph, {i: i for i in range(len(graph.ops))}
    g = graph.copy()
    ops: list[Op] = []
    index: dict[int, int] = {}
    for i, op in enumerate(g.ops):
        if i in targets:
            flag, select = _as_float(g, op.inputs[0])
            ops.append(select)
            op.inputs = [flag, *op.inputs[1:]]
        index[i] = len(ops)
        ops.append(op)
    for k, op in enumerate(ops):
        op.index = k
    g.ops = ops
    return g, index


def float_condition(cond: Graph) -> Graph:
    """The cond subgraph with its bool result turned into float32 1.0 / 0.0 by an added SELECT_V2: the comparison
    computing it can then run on the GPU (a comparison runs there when a select reads it) and the host reads the 4
    bytes of one float. Any other cond is returned as it is."""
    if len(cond.outputs) != 1 or cond.tensors[cond.outputs[0]].dtype != np.bool_:
        return cond
    g = cond.copy()
    out, select = _as_float(g, g.outputs[0])
    select.index = len(g.ops)
    g.ops.append(select)
    g.outputs = [out]
    return g


def plan_control(op: Op, graph: Graph, model: Model | None, options: EngineOptions) -> ControlPlan | str:
    """The plan of a WHILE or IF the host drives, or why LiteRT runs it instead (the CPU fallback)."""
    from .engine import plan_graph

    if model is None:
        return "the model's subgraphs are not available here"
    subgraphs = called(op)
    if any(g is None or not 0 <= int(g) < len(model.subgraphs) for g in subgraphs.values()):
        return f"subgraph references {subgraphs} are incomplete"
    subgraphs = {role: int(g) for role, g in subgraphs.items()}  # type: ignore[arg-type]
    callee = {role: model.subgraphs[g] for role, g in subgraphs.items()}
    reason = _static_interface(op, graph, callee)
    if reason is not None:
        return reason
    graphs = dict(callee)
    if op.code == "WHILE":
        graphs["cond"] = float_condition(callee["cond"])
    try:
        plans = {role: plan_graph(g, options, model) for role, g in graphs.items()}
        if op.code == "WHILE" and graphs["cond"] is not callee["cond"] and not _compared_on_gpu(plans["cond"]):
            # the comparison runs on LiteRT: a GPU program of the added select alone would only add a hop
            graphs["cond"] = callee["cond"]
            plans["cond"] = plan_graph(callee["cond"], options, model)
    except GpuEngineError as e:
        return f"a subgraph cannot be planned: {e}"
    if not any(p.device in ("gpu", "control") for plan in plans.values() for p in plan.partitions):
        return "no op of its subgraphs runs on the GPU (LiteRT runs it with its subgraphs)"
    plan = ControlPlan(op.code, subgraphs, graphs, plans)
    if op.code == "WHILE":
        plan.resident = _resident_reason(plans)
    return plan


def _compared_on_gpu(plan: Plan) -> bool:
    """Whether the bool a cond's added SELECT_V2 (float_condition) reads is computed in a GPU partition."""
    graph = plan.graph
    producers = graph.producers()
    select = producers.get(graph.outputs[0])
    if select is None or graph.ops[select].code != "SELECT_V2":
        return False
    flag = producers.get(graph.ops[select].inputs[0])
    return flag is not None and any(p.device == "gpu" and flag in p.ops for p in plan.partitions)


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def _dynamic(t: Tensor) -> bool:
    return any(d < 0 for d in t.shape) or (t.shape_signature is not None and any(d < 0 for d in t.shape_signature))


def _static_interface(op: Op, graph: Graph, callee: dict[str, Graph]) -> str | None:
    """Shapes and types that every call keeps: what the host-driven programs are compiled for."""
    if any(t < 0 for t in op.inputs):
        return "an input is omitted"
    if op.code == "WHILE":
        cond, body = callee["cond"], callee["body"]
        for k, (t_in, t_out) in enumerate(zip(op.inputs, op.outputs)):
            tensors = [graph.tensors[t_in], graph.tensors[t_out], body.tensors[body.inputs[k]],
                       body.tensors[body.outputs[k]], cond.tensors[cond.inputs[k]]]
            if any(_dynamic(t) for t in tensors) or len({_shape(t) for t in tensors}) > 1 \
                    or len({t.dtype for t in tensors}) > 1:
                return (f"loop variable {k} ({graph.tensors[t_in].name!r}) changes shape or type between iterations "
                        f"or has a dynamic shape ({', '.join(f'{_shape(t)} {t.dtype}' for t in tensors)})")
        return None
    flag = graph.tensors[op.inputs[0]]
    if flag.size != 1 or _dynamic(flag):
        return f"the condition {flag.name!r} has shape {flag.shape}, not one value"
    for role, branch in callee.items():
        pairs = [(graph.tensors[a], branch.tensors[b]) for a, b in zip(op.inputs[1:], branch.inputs)]
        pairs += [(graph.tensors[a], branch.tensors[b]) for a, b in zip(op.outputs, branch.outputs)]
        for outer, inner in pairs:
            if _dynamic(outer) or _dynamic(inner) or _shape(outer) != _shape(inner) or outer.dtype != inner.dtype:
                return (f"the {role} branch's tensor {inner.name!r} ({_shape(inner)} {inner.dtype}) differs from "
                        f"{outer.name!r} ({_shape(outer)} {outer.dtype}) or has a dynamic shape")
    return None


def _resident_reason(plans: dict[str, Plan]) -> str | None:
    """None when the loop can keep its variables on the GPU (cond and body each one GPU program, float32 loop
    variables the body computes or passes through unchanged), else why not."""
    for role in ("cond", "body"):
        parts = plans[role].partitions
        if len(parts) != 1 or parts[0].device != "gpu":
            kinds = ", ".join(p.device for p in parts) or "none"
            return f"the {role} is not one GPU program (partitions: {kinds})"
    body, cond = plans["body"].graph, plans["cond"].graph
    produced_by_body = set(plans["body"].partitions[0].outputs)
    if cond.outputs[0] not in plans["cond"].partitions[0].outputs:
        return "the cond's result is not computed on the GPU"
    seen: set[int] = set()
    for k, (t_in, t_out) in enumerate(zip(body.inputs, body.outputs)):
        if body.tensors[t_in].dtype != np.float32:
            return f"loop variable {k} is {body.tensors[t_in].dtype}; GPU programs exchange float32"
        if t_out == t_in:
            continue
        if t_out not in produced_by_body or t_out in seen:
            return f"loop variable {k} is a constant, another loop variable or a repeated output of the body"
        seen.add(t_out)
    return None


def control_program(graph: Graph, part: Partition, plan: ControlPlan, model: Model | None, options: EngineOptions,
                    gpu: GpuDevice | None, tuned: Tuned | None, num_threads: int | None) -> WhileProgram | IfProgram:
    op = graph.ops[part.ops[0]]
    cls = WhileProgram if op.code == "WHILE" else IfProgram
    return cls(graph, op, part, plan, model, options, gpu, tuned, num_threads)


def _truthy(value: Any) -> bool:
    return bool(np.asarray(value).reshape(-1)[0])


class _HostDriven:
    """What WHILE and IF share: the subgraphs compiled, inputs taken from the values or the graph's constants."""

    def __init__(self, graph: Graph, op: Op, part: Partition, plan: ControlPlan, model: Model | None,
                 options: EngineOptions, gpu: GpuDevice | None, tuned: Tuned | None, num_threads: int | None) -> None:
        from .engine import CompiledGraph

        self.graph, self.op, self.part, self.plan = graph, op, part, plan
        self.compiled: dict[str, CompiledGraph] = {
            role: CompiledGraph(plan.graphs[role], options, num_threads, gpu=gpu, tuned=tuned, model=model,
                                plan=plan.plans[role])
            for role in plan.graphs}

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
        role = "then" if _truthy(self._value(values, self.op.inputs[0])) else "else"
        self.taken = role
        branch = self.compiled[role]
        feeds = {t: self._value(values, outer) for outer, t in zip(self.op.inputs[1:], branch.source.inputs)}
        out = branch.run(feeds)
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
        final = self._loop.run(state) if self._loop is not None else self._run_on_host(state)
        if self._loop is not None:
            self.iterations = self._loop.iterations
        return dict(zip(self.op.outputs, final))

    def _run_on_host(self, state: list[np.ndarray]) -> list[np.ndarray]:
        cond, body = self.compiled["cond"], self.compiled["body"]
        self.iterations = 0
        while True:
            flag = cond.run(dict(zip(cond.source.inputs, state)))[cond.graph.outputs[0]]
            if not _truthy(flag):
                return state
            out = body.run(dict(zip(body.source.inputs, state)))
            state = [np.asarray(out[t]) for t in body.graph.outputs]
            self.iterations += 1


class _ResidentLoop:
    """The ping-pong loop of a WHILE whose cond and body are each one GPU program (module docstring)."""

    def __init__(self, cond: CompiledGraph, body: CompiledGraph, plan: ControlPlan) -> None:
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

    def run(self, state: list[np.ndarray]) -> list[np.ndarray]:
        from .runtime.device import DEVICE_LOST

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
            flag = self.conds[current].run({})[self.result]
            if not _truthy(flag):
                break
            self.bodies[current].submit({}, read=False)
            last, current = current, 1 - current
            self.iterations += 1
        if last is None:
            return state
        values = self.bodies[last].read_outputs()
        return [state[k] if k in self.own else values[t] for k, t in enumerate(self.outputs)]


def _twin(compiled: CompiledGraph, plan: Plan) -> GpuProgram:
    """A second instance of a graph's one GPU program: same kernels (pipelines are shared by WGSL text), buffers
    of its own."""
    from .runtime.program import GpuProgram

    first = compiled.gpu_programs[0]
    part = plan.partitions[0]
    return GpuProgram(plan.graph, part.ops, part.inputs, part.outputs, first.gpu, first.options,
                      first.choices.tuned, first.target, first.precision)


__all__ = ["CONTROL_OPS", "ControlPlan", "IfProgram", "WhileProgram", "control_program", "describe_control",
           "float_condition", "float_if_conditions", "partition_report", "plan_control"]
