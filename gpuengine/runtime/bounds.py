"""Host-side checks of run-time indices that come from the host: a token id outside the vocabulary or a position
outside a table gives LiteRT's exception before anything is uploaded, never a clamped (wrong) row.

The GPU kernels of EMBEDDING_LOOKUP, GATHER_ND and GATHER (lowering/kernels/dynamic_index.py) clamp their indices, so a
shader never reads outside a buffer; LiteRT raises instead (RuntimeError from invoke, "Embedding Lookup: index out
of bounds", "gather_nd index out of bounds", "gather index out of bounds"). Where an op's indices are computed
from graph inputs and constants alone, through a few small integer ops (RESHAPE, CAST, the `pos < 0 ? pos + n :
pos` of litert-torch's positions or of a converter's token-id fix-up, PACK, ...), that cone of ops is found once
per compiled graph and evaluated on the host per invoke with the float64 reference executor's op definitions
(reference.py; a handful of numpy calls on tensors of a few elements), then the indices are compared with the
op's bounds. Indices computed from float tensors or by large cones (ARG_MAX of logits on the GPU, ...) are not
checked: the shader clamp holds for them.
DYNAMIC_UPDATE_SLICE needs no check: LiteRT clamps its offsets so the update fits, and so does the shader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..model.ir import Graph, Op

# op -> (indices input, indexed input)
CHECKED_OPS = {"EMBEDDING_LOOKUP": (0, 1), "GATHER_ND": (1, 0), "GATHER": (1, 0)}
MAX_CONE_OPS = 16  # a cone larger than this is not worth evaluating per invoke
MAX_CONE_ELEMENTS = 1 << 16  # per tensor of the cone


@dataclass
class IndexCheck:
    """One index operand fed (through `cone`) by graph inputs `sources`."""

    op: Op
    indices: int  # the op's index tensor
    bounds: tuple[int, ...]  # sizes of the indexed axes (EMBEDDING_LOOKUP: the table's rows)
    cone: list[Op]  # ops computing `indices` from sources and constants, in graph order
    sources: list[int]
    first_axis: int = 0  # the indexed table's axis of bounds[0] (GATHER: its `axis`)


def _integer(graph: Graph, t: int) -> bool:
    tensor = graph.tensors[t]
    return tensor.dtype.kind in "iub" and tensor.quantization is None and tensor.size <= MAX_CONE_ELEMENTS


class IndexChecks:
    """The index checks of one graph, built once (per compiled shape); `check(values)` per invoke."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.checks: list[IndexCheck] = []
        producer = {t: op for op in graph.ops for t in op.outputs}
        order = {id(op): k for k, op in enumerate(graph.ops)}
        inputs = set(graph.inputs)
        for op in graph.ops:
            if op.code not in CHECKED_OPS or len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
                continue
            # the float64 executor's op table, loaded only for a graph that has an op to check (import gpuengine
            # loads no reference executor)
            from ..reference import BUILTIN_OPS
            index_input, table_input = CHECKED_OPS[op.code]
            indices, table = op.inputs[index_input], op.inputs[table_input]
            cone: dict[int, Op] = {}
            sources: set[int] = set()
            pending, usable = [indices], True
            while pending and usable:
                t = pending.pop()
                if t in inputs:
                    sources.add(t)
                    continue
                if graph.tensors[t].data is not None:
                    continue
                p = producer.get(t)
                usable = (p is not None and p.code in BUILTIN_OPS and not p.is_custom and len(cone) < MAX_CONE_OPS
                          and all(_integer(graph, u) for u in [*p.inputs, *p.outputs] if u >= 0))
                if usable and p.index not in cone:
                    cone[p.index] = p
                    pending.extend(u for u in p.inputs if u >= 0)
            if not usable or not sources or not _integer(graph, indices):
                continue  # computed on the GPU from floats, or a large cone: the shader clamp holds
            shape = graph.tensors[table].shape
            first, k = 0, 1
            if op.code == "GATHER_ND":
                k = graph.tensors[indices].shape[-1] if graph.tensors[indices].shape else 0
            elif op.code == "GATHER":
                first, k = int(op.opt("axis", 0) or 0), 1
                first += len(shape) if first < 0 else 0
                if not 0 <= first < len(shape):
                    continue  # a bad axis: the op's own check refuses it
            bounds = tuple(shape[first:first + k])
            if not bounds:
                continue  # indices that index nothing: the op's own check refuses them
            ordered = sorted(cone.values(), key=lambda o: order[id(o)])
            if any(c.indices == indices and c.bounds == bounds and c.first_axis == first for c in self.checks):
                continue  # the same indices against the same bounds (a position reading several tables)
            self.checks.append(IndexCheck(op, indices, bounds, ordered, sorted(sources), first))

    def __bool__(self) -> bool:
        return bool(self.checks)

    def check(self, values: Mapping[int, np.ndarray], names: Mapping[int, str] | None = None) -> None:
        """Raise LiteRT's RuntimeError (naming the op, the input and the valid range) for an index out of bounds.
        values: the host values of the graph's inputs; names: what to call an input (signature names)."""
        if not self.checks:
            return
        from ..reference import BUILTIN_OPS, Node, _as_declared  # loaded once a graph has a check (__init__)

        known: dict[int, np.ndarray] = {}

        def value(t: int) -> np.ndarray:
            if t not in known:
                tensor = self.graph.tensors[t]
                data = values[t] if t in values else tensor.data
                known[t] = np.asarray(data).reshape(tensor.shape)
            return known[t]

        for c in self.checks:
            if any(t not in values for t in c.sources):
                continue  # an input read from a GPU buffer: not the host's to check
            try:
                for op in c.cone:
                    if all(t in known for t in op.outputs):
                        continue
                    with np.errstate(all="ignore"):
                        outs = BUILTIN_OPS[op.code](Node(op, self.graph, [value(t) if t >= 0 else None
                                                                          for t in op.inputs]))
                    for t, v in zip(op.outputs, outs):
                        known[t] = _as_declared(self.graph.tensors[t], v)
                indices = np.asarray(value(c.indices), np.int64)
            except (ValueError, IndexError, KeyError):  # an op of the cone refused its own inputs: its own check
                continue
            if indices.size:
                self._raise_if_outside(c, indices.reshape(-1, len(c.bounds)), names or {})

    def _raise_if_outside(self, c: IndexCheck, rows: np.ndarray, names: Mapping[int, str]) -> None:
        limits = np.array(c.bounds, np.int64)
        if rows.min() >= 0 and (rows < limits).all():
            return
        bad = int(np.argmax(((rows < 0) | (rows >= limits)).any(axis=1)))
        axis = int(np.argmax((rows[bad] < 0) | (rows[bad] >= limits)))
        got, size = int(rows[bad, axis]), int(limits[axis])
        axis += c.first_axis
        origin = ", ".join(repr(names.get(t, self.graph.tensors[t].name)) for t in c.sources)
        via = "come from" if all(o.code == "RESHAPE" for o in c.cone) else "are computed from"
        where = (f"{c.op.code} (op {c.op.index}) reads index {got} along axis {axis} of "
                 f"{self.graph.tensors[c.op.inputs[CHECKED_OPS[c.op.code][1]]].shape}, valid [0, {size - 1}]; the "
                 f"indices {via} input {origin}")
        if c.op.code == "EMBEDDING_LOOKUP":
            lite = f"Embedding Lookup: index out of bounds. Got {got}, and bounds are [0, {size - 1}]"
        elif c.op.code == "GATHER":
            lite = ("indices_has_only_positive_elements was not true. " if got < 0 else "") \
                + "gather index out of bounds"
        elif got < 0:
            lite = "gather_nd: indices_has_only_positive_elements was not true"
        else:
            lite = "gather_nd index out of bounds"
        raise RuntimeError(f"{lite}. Node number {c.op.index} ({c.op.code}) failed to invoke: {where}")
