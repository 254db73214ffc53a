"""A CPU partition -> its own .tflite sub-model (written with the builder) -> LiteRT's interpreter."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuengine.errors import UnsupportedOpError
from gpuengine.model.builder import write_model
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
    sub = Graph(tensors=tensors, ops=ops, inputs=[remap[t] for t in part.inputs],
                outputs=[remap[t] for t in part.outputs], name="cpu_partition")
    return write_model(Model(subgraphs=[sub])), remap


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
        model, self.remap = sub_model(graph, part)
        self.interpreter = Interpreter(model_content=model, num_threads=num_threads)
        self.interpreter.allocate_tensors()

    def run(self, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        for t in self.part.inputs:
            self.interpreter.set_tensor(self.remap[t], np.asarray(feeds[t], self.graph.tensors[t].dtype))
        self.interpreter.invoke()
        return {t: self.interpreter.get_tensor(self.remap[t]) for t in self.part.outputs}
