"""A CPU partition -> its own .tflite sub-model (written with the builder) -> LiteRT's interpreter."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from gpuengine.errors import ModelError, UnsupportedOpError
from gpuengine.litert_logging import without_litert_info
from gpuengine.model.builder import give_bias, write_model
from gpuengine.model.ir import Graph, Model, Op, Options, Tensor

from .partition import Partition

INSTALL = "pip install 'gpuengine[litert]'  (installs ai-edge-litert, LiteRT's CPU runtime)"


def called_subgraphs(op: Op) -> dict[str, int]:
    """{options field: subgraph index} of the subgraphs an op runs (WHILE cond/body, IF branches, CALL_ONCE init,
    a STABLEHLO_COMPOSITE's decomposition)."""
    if op.options is None:
        return {}
    return {n: int(v) for n, v in op.options.fields.items() if n.endswith("subgraph_index") and v is not None}


def _with_calls(op: Op, renumber: dict[int, int]) -> Op:
    """The op with its subgraph references renumbered (its options copied, never shared with the source)."""
    calls = called_subgraphs(op)
    if not calls:
        return op
    fields = {**op.options.fields, **{n: renumber[v] for n, v in calls.items()}}  # type: ignore[union-attr]
    return dataclasses.replace(op, options=Options(op.options.kind, fields))  # type: ignore[union-attr]


def _placeholder(t: Tensor) -> Tensor:
    """A tensor whose shape only a run tells (model/shapes.py marks it -1) is written with 1 there and -1 in its
    shape_signature: LiteRT reads no negative size, and computes the real one as it runs."""
    if all(d >= 0 for d in t.shape):
        return t
    return dataclasses.replace(t, shape=tuple(max(d, 1) for d in t.shape),
                               shape_signature=tuple(-1 if d < 0 else d for d in t.shape))


def sub_model(graph: Graph, part: Partition, model: Model | None = None) -> tuple[bytes, dict[int, int]]:
    """The partition's ops as a standalone model; returns it and the map graph tensor -> sub-model tensor.

    Every subgraph the ops call (WHILE/IF bodies, composite decompositions), and every subgraph those call, is
    carried along as a subgraph of the sub-model, renumbered, so LiteRT can run them."""
    order: list[int] = []
    for i in part.ops:
        for t in [*graph.ops[i].inputs, *graph.ops[i].outputs, *graph.ops[i].intermediates]:
            if t >= 0 and t not in order:
                order.append(t)
    remap = {t: k for k, t in enumerate(order)}
    tensors = [_placeholder(dataclasses.replace(graph.tensors[t], index=remap[t])) for t in order]
    ops = [dataclasses.replace(graph.ops[i], index=k,
                               inputs=[remap[t] if t >= 0 else -1 for t in graph.ops[i].inputs],
                               outputs=[remap[t] for t in graph.ops[i].outputs],
                               intermediates=[remap[t] for t in graph.ops[i].intermediates])
           for k, i in enumerate(part.ops)]
    carried = _carried(ops, model)
    renumber = {g: k + 1 for k, g in enumerate(carried)}
    ops = [_with_calls(op, renumber) for op in ops]
    for op in ops:
        give_bias(op, tensors)
    sub = Graph(tensors=tensors, ops=ops, inputs=[remap[t] for t in part.inputs],
                outputs=[remap[t] for t in part.outputs], name="cpu_partition")
    subgraphs = [sub]
    for g in carried:
        callee = model.subgraphs[g].copy()  # type: ignore[union-attr]
        callee.ops = [_with_calls(op, renumber) for op in callee.ops]
        for op in callee.ops:
            give_bias(op, callee.tensors)
        subgraphs.append(callee)
    return write_model(Model(subgraphs=subgraphs)), remap


def _carried(ops: list[Op], model: Model | None) -> list[int]:
    """The model's subgraphs that `ops` call, directly or through each other, in the order first reached."""
    found: list[int] = []
    pending = [g for op in ops for g in called_subgraphs(op).values()]
    while pending:
        g = pending.pop(0)
        if g in found:
            continue
        if model is None or not 0 <= g < len(model.subgraphs):
            raise UnsupportedOpError(f"an op calls subgraph {g}, which the CPU fallback was not given")
        found.append(g)
        pending += [c for op in model.subgraphs[g].ops for c in called_subgraphs(op).values()]
    return found


def refusal(error: Exception, graph: Graph, part: Partition) -> Exception:
    """LiteRT refusing to prepare a sub-model, as an error naming the model's op: a custom op it has no kernel
    for is UnsupportedOpError; any other op it refuses is malformed in a way the validator (model/validate.py)
    has no rule for yet, a ModelError with LiteRT's reason. Anything else is returned unchanged."""
    text = str(error)
    missing = re.search(r"Didn't find op for builtin opcode '([^']+)' version '(\d+)'", text)
    if missing is not None:  # a builtin this LiteRT build does not register (most STABLEHLO_* ops)
        ops = [graph.ops[i] for i in part.ops if graph.ops[i].code == missing.group(1)]
        where = f"op {ops[0].index} ({ops[0].code})" if ops else f"builtin {missing.group(1)}"
        return UnsupportedOpError(f"{where} cannot run on the GPU, and LiteRT's CPU runtime has no kernel for it "
                                  f"(version {missing.group(2)})")
    node = re.search(r"Node number (\d+) \(([^)]*)\) failed to prepare", text)
    if node is None or int(node.group(1)) >= len(part.ops):
        return error
    op = graph.ops[part.ops[int(node.group(1))]]
    where = f"op {op.index} ({op.code})"
    if "unresolved custom op" in text:
        from gpuengine.lowering.kernels import registry

        return UnsupportedOpError(f"{where} cannot run on the GPU ({registry.check(op, graph) or 'not chosen'}) "
                                  "and LiteRT's CPU runtime has no kernel for this custom op")
    reason = text[:node.start()].strip().replace("\n", " ")
    return ModelError(f"{where}: LiteRT's CPU runtime cannot prepare it: {reason or text}")


class CpuProgram:
    """Runs one CPU partition on LiteRT; same run(feeds) -> outputs contract as GpuProgram."""

    def __init__(self, graph: Graph, part: Partition, num_threads: int | None = None,
                 model: Model | None = None) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as e:
            names = sorted({graph.ops[i].code for i in part.ops})
            raise UnsupportedOpError(
                f"ops {names} cannot run on the GPU and need the CPU fallback, which is not installed. "
                f"Install it with: {INSTALL}") from e
        self.graph, self.part = graph, part
        model_bytes, self.remap = sub_model(graph, part, model)
        try:
            with without_litert_info():  # its XNNPACK delegate says it was created
                self.interpreter = Interpreter(model_content=model_bytes, num_threads=num_threads)
                self.interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as e:
            error = refusal(e, graph, part)
            # An op nothing can run is named in full: LiteRT's own traceback would only repeat it.
            raise error from (None if isinstance(error, UnsupportedOpError) else e)
        self._shapes = {t: tuple(graph.tensors[t].shape) for t in part.inputs}

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        resized = False
        for t in self.part.inputs:  # a shape known only at run time (an earlier CPU partition computed it)
            shape = tuple(np.shape(feeds[t]))
            if shape != self._shapes[t]:
                self.interpreter.resize_tensor_input(self.remap[t], list(shape))
                self._shapes[t], resized = shape, True
        if resized:
            self.interpreter.allocate_tensors()
        for t in self.part.inputs:
            self.interpreter.set_tensor(self.remap[t], np.asarray(feeds[t], self.graph.tensors[t].dtype))
        self.interpreter.invoke()
        return {t: self.interpreter.get_tensor(self.remap[t]) for t in self.part.outputs}
