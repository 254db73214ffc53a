"""Planning a graph, before touching a GPU: validate, run the graph passes, decide per op where it runs and
partition (GPU programs, CPU fallbacks, WHILE / IF ops the host drives, each of their subgraphs planned the same
way); plans per input shapes (ShapeCache); and every GPU partition's dispatches (`planned_dispatches`, for reports
and the render hash). runtime/graph.py runs a plan.

A WHILE or IF runs host-driven when one of its subgraphs has an op for the GPU and its loop variables / branch
tensors keep their shapes (`plan_control`; runtime/control_flow.py executes it). The cond's bool result becomes
float 1.0 / 0.0 through an added SELECT_V2 (`float_condition`), so the comparison computing it runs on the GPU,
whose programs exchange floats; an IF's condition likewise (`float_if_conditions`). A WHILE or IF none of whose
subgraphs has an op for the GPU stays with LiteRT: the CPU fallback's sub-model carries the subgraphs it calls
(delegate/cpu_fallback.py). So does one whose loop variables change shape.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tflite.BuiltinOperator import BuiltinOperator

from .delegate.partition import Partition, partition, with_boundaries
from .delegate.support import gpu_support, unsupported_summary
from .errors import GpuEngineError
from .latency import devices
from .latency.latency import Device
from .latency.limits import BASELINE, DeviceLimits
from .latency.target import Target
from .latency.target import check as check_target
from .lowering.dispatches import Choices, partition_specs
from .lowering.kernels.base import KernelSpec
from .model.builder import make_options
from .model.ir import Graph, Model, Op, Tensor
from .model.shapes import propagate, shape_key
from .model.symbolic import analyze
from .model.validate import validate_graph
from .options import EngineOptions
from .passes.constant_operands import bind_constant_operands
from .passes.lasnet_blocks import MaskedBlock, find_masked_blocks
from .passes.pipeline import run_passes

CONTROL_OPS = frozenset({"WHILE", "IF"})
ROLES = {"WHILE": ("cond", "body"), "IF": ("then", "else")}


@dataclass
class Plan:
    """What the engine decided for a graph, before touching the GPU (inspect uses this alone)."""

    graph: Graph
    support: dict[int, str | None]
    partitions: list[Partition]
    unsupported: dict[str, str] = field(default_factory=dict)
    control: dict[int, ControlPlan] = field(default_factory=dict)  # WHILE / IF ops the host drives, by op index
    sparse: dict[int, SparseMode] = field(default_factory=dict)  # spatially sparse blocks, by their first op

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
    partitions = partition(optimized, support, set(control))
    sparse: dict[int, SparseMode] = {}
    if options.sparse_blocks is not None:
        partitions, sparse = sparse_partitions(optimized, partitions, options)
    return Plan(optimized, support, partitions, unsupported_summary(optimized, support), control, sparse)


@dataclass
class SparseMode:
    """A LASNet-style masked block that runs spatially sparse (lowering/lasnet.py) at execution patch `patch`;
    `predicted`: the latency model's ns per option at the expected rate (latency/sparse.choose_execution)."""

    block: MaskedBlock
    patch: int
    predicted: dict[str, float]
    pixels: int = 8  # the block kernel's decomposition (lowering/kernels/lasnet.PIXELS), predicted fastest


def sparse_partitions(graph: Graph, partitions: list[Partition], options: EngineOptions,
                      ) -> tuple[list[Partition], dict[int, SparseMode]]:
    """The masked blocks (passes/lasnet_blocks.py) the latency model predicts faster sparse at
    options.sparse_blocks (the expected activation rate), by their first op: their GPU partition runs them
    spatially sparse, its other ops densely, in one program (lowering/lasnet.py). A block the kernels cannot take,
    or whose ops are not all in one GPU partition, stays dense. The partitions are returned as they were."""
    from .latency.latency import predict_ns
    from .latency.sparse import best_pixels, choose_execution
    from .latency.target import named
    from .lowering.kernels import lasnet
    from .lowering.kernels.dispatch_cost import dispatch_cost

    device = planning_device(options)
    out = list(partitions)
    modes: dict[int, SparseMode] = {}
    for block in find_masked_blocks(graph):
        ops = sorted(block.ops)
        k = next((k for k, p in enumerate(out) if p.device == "gpu" and set(ops) <= set(p.ops)), None)
        patches = tuple(p for p in lasnet.PATCHES if lasnet.supports(block, p) is None)
        if k is None or not patches:
            continue
        alone = with_boundaries(graph, "gpu", ops)
        specs = partition_specs(graph, alone.ops, alone.inputs, alone.outputs, options.optimize,
                                Choices(named(device.target)), precision=options.precision)[0]
        # the block's own dispatches: the layout converters at the boundaries of a partition of the block alone are
        # there dense or sparse
        dense_ns = sum(predict_ns(dispatch_cost(spec, graph, options.precision), device) for spec in specs
                       if set(spec.ops) & set(block.ops))
        mode, size, predicted = choose_execution(device, *block.shape, block.cell, float(options.sparse_blocks or 0),
                                                 dense_ns, patches)
        if mode == "dense":
            continue
        rate = float(options.sparse_blocks or 0)
        modes[ops[0]] = SparseMode(block, size, predicted, best_pixels(device, *block.shape, block.cell, size, rate))
    return out, modes


def planning_device(options: EngineOptions) -> Device:
    """The latency model's description of the device a plan is for: the one the options carry (the interpreter
    sets the adapter's, runtime/graph.for_adapter), else the built-in one of the target class asked for (options.target,
    env GPUENGINE_TARGET), else of a discrete GPU."""
    if options.latency_device is not None:
        return options.latency_device
    choice = check_target(options.target)
    return devices.for_target("discrete" if choice == "auto" else choice)


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


# The probes' symbolic sizes: the run's plus 7 (odd: parity-dependent numbers change too), and 4x + 13 (numbers
# that round to the same value at nearby sizes, such as tile counts, change too).
PROBES = ((1, 7), (4, 13))


def probe_shapes(graph: Graph, model: Model | None,
                 shapes: dict[int, tuple[int, ...]]) -> list[dict[int, tuple[int, ...]]]:
    """Input shapes with every size Rank and Dimension Propagation leaves symbolic moved (model/symbolic.py): the
    other sizes at which the engine renders the kernels, to find the numbers that depend on the sizes
    (lowering/parametric.py). Empty when no input size is free."""
    if not any(any(d < 0 for d in graph.tensors[t].shape_signature or ()) for t in graph.inputs):
        return []  # a static model: no propagation to run
    rdp = analyze(graph, model)
    free = set(rdp.free)
    axes = [(t, axis) for name, (t, axis) in rdp.input_axes.items() if name in free]
    if not axes:
        return []
    out = []
    for scale, step in PROBES:
        moved = {t: list(shapes.get(t, graph.tensors[t].shape)) for t in graph.inputs}
        for t, axis in axes:
            moved[t][axis] = moved[t][axis] * scale + step
        out.append({t: tuple(s) for t, s in moved.items()})
    return out


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
                       limits: DeviceLimits = BASELINE) -> tuple[Plan, list[list[KernelSpec]]]:
    """The plan and the dispatches of every GPU partition as they would be decomposed for `target` on an adapter
    without a tuning cache, computed without touching a GPU (nothing is compiled). model: where the graph's
    composites' decompositions are (a signature's subgraph); limits: the device's (default: WebGPU's defaults)."""
    if options.latency_device is None:  # fusions decided for the target's class too
        options = dataclasses.replace(options, latency_device=devices.for_target(target))
    plan = plan_graph(graph, options, model)
    # a full device's report keeps the KV cache writes a device with more storage buffers shares (today's plans);
    # planned for a baseline device, they are split as its program splits them
    choices = Choices(target, limits=limits, split_writes=options.device_profile == "baseline" or limits != BASELINE)
    return plan, [partition_specs(plan.graph, p.ops, p.inputs, p.outputs, options.optimize, choices,
                                  precision=options.precision)[0]
                  for p in plan.partitions if p.device == "gpu"]


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
    sparse = [{"first_op": i, "ops": len(m.block.ops), "patch": m.patch,
               "predicted_us": {k: v / 1e3 for k, v in m.predicted.items()}}
              for i, m in sorted(plan.sparse.items()) if p.device == "gpu" and i in p.ops]
    if p.device != "control":
        return {"device": p.device, "ops": ops, **({"sparse": sparse} if sparse else {})}
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
    graphs = {role: bind_constant_operands(g, _constant_operands(op, graph, role, callee))
              for role, g in callee.items()}
    callee = dict(graphs)
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
        if plan.resident is not None:
            _cond_on_host(plan, callee["cond"])
    return plan


COND_ON_HOST = ("the loop variables cross the host anyway: the host evaluates the cond (LiteRT's CPU kernels), "
                "no GPU round trip per iteration")


def _cond_on_host(plan: ControlPlan, cond: Graph) -> None:
    """A loop on the host path (its variables are host arrays between iterations) decides each iteration by
    running its cond on the CPU: on the GPU every decision is a submit and a readback (DyCL's decision cost, docs/
    design/dycl.md), for a comparison of a few scalars. Kept on the GPU when LiteRT is not installed or the cond
    holds what LiteRT alone cannot run (a custom op, nested control flow)."""
    import importlib.util

    if importlib.util.find_spec("ai_edge_litert") is None or \
            any(o.is_custom or o.code in CONTROL_OPS for o in cond.ops):
        return
    support: dict[int, str | None] = {i: COND_ON_HOST for i in range(len(cond.ops))}
    plan.graphs["cond"] = cond
    plan.plans["cond"] = Plan(cond, support, partition(cond, support), unsupported_summary(cond, support))


def _constant_operands(op: Op, graph: Graph, role: str, callee: dict[str, Graph]) -> dict[int, np.ndarray]:
    """Per input position of the `role` subgraph, the constant the op hands it (passes/constant_operands.py): an
    IF's operands after the condition; a WHILE's initial values that the body passes through unchanged (the same
    constant in every iteration)."""
    operands = op.inputs[1:] if op.code == "IF" else op.inputs
    body = callee.get("body")
    out: dict[int, np.ndarray] = {}
    for k, t in enumerate(operands):
        tensor = graph.tensors[t] if t >= 0 else None
        if tensor is None or tensor.data is None or tensor.is_variable:
            continue
        if op.code == "WHILE" and (body is None or k >= len(body.inputs) or k >= len(body.outputs)
                                   or body.outputs[k] != body.inputs[k]):
            continue
        out[k] = np.asarray(tensor.data)
    return out


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
        if body.tensors[t_in].dtype not in (np.float32, np.int32):
            return f"loop variable {k} is {body.tensors[t_in].dtype}; GPU programs exchange float32 (int32 as float32)"
        if t_out == t_in:
            continue
        if t_out not in produced_by_body or t_out in seen:
            return f"loop variable {k} is a constant, another loop variable or a repeated output of the body"
        seen.add(t_out)
    return None


