"""Graph edits the passes share: who consumes a tensor, rewiring, dropping ops."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..model.builder import options_kind
from ..model.ir import Graph, Op, Options
from ..model.quantization import is_quantized


def consumers(graph: Graph, tensor: int) -> list[Op]:
    return [op for op in graph.ops if tensor in op.inputs]


def sole_consumer(graph: Graph, tensor: int) -> Op | None:
    """The one op reading `tensor`, if exactly one reads it and it is not a graph output."""
    users = consumers(graph, tensor)
    if len(users) != 1 or tensor in graph.outputs:
        return None
    return users[0]


def producer(graph: Graph, tensor: int) -> Op | None:
    for op in graph.ops:
        if tensor in op.outputs:
            return op
    return None


def same_grid(graph: Graph, a: int, b: int) -> bool:
    """Tensors a and b hold values on the same quantization grid (or are both unquantized): an op copying a to b
    changes no value, so a pass may drop it; between different grids the op rounds, and must stay."""
    qa, qb = graph.tensors[a].quantization, graph.tensors[b].quantization
    if qa is None or qb is None:
        return qa is qb
    return (np.array_equal(qa.scale, qb.scale) and np.array_equal(qa.zero_point, qb.zero_point)
            and qa.axis == qb.axis)


def rounds(graph: Graph, tensor: int) -> bool:
    """A run-time quantized tensor: its writer rounds values to its grid, so a pass must not fuse it away."""
    return is_quantized(graph.tensors[tensor])


def const(graph: Graph, tensor: int) -> np.ndarray | None:
    if tensor < 0:
        return None
    data = graph.tensors[tensor].data
    return None if data is None else np.asarray(data)


def bypass(graph: Graph, op: Op) -> bool:
    """Remove a single-input identity op by rewiring its consumers to its input; False if it must stay
    (its output is a graph output, whose index the API exposes)."""
    src, out = op.inputs[0], op.outputs[0]
    if out in graph.outputs:
        return False
    for other in graph.ops:
        other.inputs = [src if t == out else t for t in other.inputs]
    graph.ops = [o for o in graph.ops if o is not op]
    return True


def new_const(graph: Graph, like: int, data: np.ndarray, name: str) -> int:
    """Add a constant tensor (weights rewritten by a pass; dtype from `data`) and return its index."""
    from ..model.ir import DTYPE_TO_TYPE

    data = np.ascontiguousarray(data)
    graph.tensors.append(dataclasses.replace(
        graph.tensors[like], index=len(graph.tensors), name=name, shape=tuple(data.shape), data=data,
        dtype=data.dtype, type_code=DTYPE_TO_TYPE[data.dtype], quantization=None, sparsity=None, buffer=0,
        shape_signature=None))
    return len(graph.tensors) - 1


def with_fields(op: Op, inputs: list[int] | None = None, **fields: Any) -> Op:
    """A copy of `op` (same output) reading `inputs`, with option fields added or replaced; the passes use it
    for internal fields (explicit_padding, zero_extend, prologue) that only the GPU kernels understand."""
    options = op.options or Options(options_kind(op.code) or f"{op.code}Options")
    return dataclasses.replace(op, inputs=list(op.inputs if inputs is None else inputs),
                               options=dataclasses.replace(options, fields={**options.fields, **fields}))
