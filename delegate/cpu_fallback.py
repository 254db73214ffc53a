"""A CPU partition -> its own .tflite sub-model (written with the builder) -> LiteRT's interpreter."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from gpuengine.errors import ModelError, UnsupportedOpError
from gpuengine.model.builder import give_bias, write_model
from gpuengine.model.ir import Graph, Model

from .partition import Partition

INSTALL = "pip install 'gpuengine[litert]'  (installs ai-edge-litert, LiteRT's CPU runtime)"


def sub_model(graph: Graph, part: Partition) -> tuple[bytes, dict[int, int]]:
    """The partition's ops as a standalone model; returns it and the map graph tensor -> sub-model tensor."""
    order: list[int] = []
    for i in part.ops:
        for t in [*graph.ops[i].inputs, *graph.ops[i].outputs, *graph.ops[i].intermediates]:
            if t >= 0 and t not in order:
                order.append(t)
    remap = {t: k for k, t in enumerate(order)}
    tensors = [dataclasses.replace(graph.tensors[t], index=remap[t]) for t in order]
    ops = [dataclasses.replace(graph.ops[i], index=k,
                               inputs=[remap[t] if t >= 0 else -1 for t in graph.ops[i].inputs],
                               outputs=[remap[t] for t in graph.ops[i].outputs],
                               intermediates=[remap[t] for t in graph.ops[i].intermediates])
           for k, i in enumerate(part.ops)]
    for op in ops:
        give_bias(op, tensors)
    sub = Graph(tensors=tensors, ops=ops, inputs=[remap[t] for t in part.inputs],
                outputs=[remap[t] for t in part.outputs], name="cpu_partition")
    return write_model(Model(subgraphs=[sub])), remap


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
        from gpuengine.kernels import registry

        return UnsupportedOpError(f"{where} cannot run on the GPU ({registry.check(op, graph) or 'not chosen'}) "
                                  "and LiteRT's CPU runtime has no kernel for this custom op")
    reason = text[:node.start()].strip().replace("\n", " ")
    return ModelError(f"{where}: LiteRT's CPU runtime cannot prepare it: {reason or text}")


class CpuProgram:
    """Runs one CPU partition on LiteRT; same run(feeds) -> outputs contract as GpuProgram."""

    def __init__(self, graph: Graph, part: Partition, num_threads: int | None = None) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as e:
            names = sorted({graph.ops[i].code for i in part.ops})
            raise UnsupportedOpError(
                f"ops {names} cannot run on the GPU and need the CPU fallback, which is not installed. "
                f"Install it with: {INSTALL}") from e
        self.graph, self.part = graph, part
        for i in part.ops:
            op = graph.ops[i]
            called = {n: v for n, v in (op.options.fields.items() if op.options is not None else ())
                      if n.endswith("subgraph_index") and v is not None}
            if called:
                names = ", ".join(f"{n} {v}" for n, v in called.items())
                raise UnsupportedOpError(f"op {op.index} ({op.code}) calls other subgraphs ({names}); it cannot run on "
                                         "the GPU, and the CPU fallback runs each partition as a one-subgraph model")
        model, self.remap = sub_model(graph, part)
        try:
            self.interpreter = Interpreter(model_content=model, num_threads=num_threads)
            self.interpreter.allocate_tensors()
        except (RuntimeError, ValueError) as e:
            raise refusal(e, graph, part) from e

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        for t in self.part.inputs:
            self.interpreter.set_tensor(self.remap[t], np.asarray(feeds[t], self.graph.tensors[t].dtype))
        self.interpreter.invoke()
        return {t: self.interpreter.get_tensor(self.remap[t]) for t in self.part.outputs}
