"""The latency model (latency/latency.py) applied to lowered dispatches: what a KernelSpec reads, writes and
launches, as the model sees it (`DispatchCost`), and the predicted time of an op lowered alone.

It lives with the kernels because it reads their specs (bindings, workgroups, decompositions) and the PHWC4
layout; the model itself knows only numbers and imports nothing above gpuengine.model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ...latency.latency import (
    Device,
    DispatchCost,
    ModelPrediction,
    floor_ns,
    lane_memory,
    predict_ns,
    split_barriers,
    split_shuffles,
)
from ...latency.sparse import block_costs
from ...model.ir import Graph
from .. import codegen
from ..layout import phwc4_elements
from . import tiling
from .base import Binding, KernelSpec, Variants

LASNET = ("lasnet_mask", "lasnet_args", "lasnet_block")  # kernels/lasnet.py's dispatches, in order


def stored_as_f16(b: Binding, precision: str) -> bool:
    """Whether a constant binding's f32 data is uploaded as f16: storage-typed float data in fp16 mode."""
    return (precision == "fp16" and not b.exact and b.element in codegen.STORAGE_TYPES
            and np.asarray(b.data).dtype == np.float32)


def binding_bytes(b: Binding, graph: Graph, precision: str = "fp32") -> int:
    """Bytes a binding's buffer range holds, as the runtime allocates it and without a device: a constant's data
    (stored_as_f16), scratch space, a BHWC boundary buffer or a PHWC4 tensor in its storage type."""
    if b.data is not None:
        nbytes = np.asarray(b.data).nbytes
        return max(4, nbytes // 2 if stored_as_f16(b, precision) else nbytes)
    if b.scratch_bytes:
        return int(b.scratch_bytes)
    if b.tensor is None:
        return 0
    shape = graph.tensors[b.tensor].shape
    if b.raw:
        return max(4, int(np.prod(shape, dtype=np.int64)) * 4)
    return max(16, phwc4_elements(shape) * (4 if b.exact else codegen.element_bytes("S1", precision)))


def touched_bytes(b: Binding, graph: Graph, precision: str = "fp32", position: int | None = None) -> int:
    """Bytes a dispatch moves of a binding: all it holds, or the part the kernel declares it touches
    (`Binding.touched`: a gather's rows, a KV-cache write's update, a cache read up to `position`)."""
    whole = binding_bytes(b, graph, precision)
    return whole if b.touched is None else math.ceil(whole * b.touched.fraction(position))


def _workgroups(spec: KernelSpec) -> tuple[int, int]:
    """(workgroups, invocations per workgroup) of a finished spec."""
    wg = spec.workgroup or (tiling.WORKGROUP, 1, 1)
    groups = codegen.dispatch_size(dataclasses.replace(spec, workgroup=wg))
    return int(np.prod(groups)), int(np.prod(wg))


def dispatch_cost(spec: KernelSpec, graph: Graph, precision: str = "fp32", position: int | None = None) -> DispatchCost:
    """The model's view of one finished dispatch (workgroup set); bytes as the kernel touches them (`position`: a
    decode step's, for bindings read up to it; None: the whole cache)."""
    if spec.shader in LASNET:  # priced as latency/sparse.py prices them, at the active patches expected
        p = spec.params
        costs = block_costs(int(p["H"]), int(p["W"]), 4 * int(p["C4"]), int(p["CELL"]), int(p["P"]),
                            max(float(p["ACTIVE"]), 1.0 if spec.shader == LASNET[2] else 0.0), int(p["PIXELS"]))
        return dataclasses.replace(costs[LASNET.index(spec.shader)], label=spec.label)
    groups, per_group = _workgroups(spec)
    invocations = groups * per_group
    read = sum(touched_bytes(b, graph, precision, position) for b in spec.bindings if not b.writable)
    written = sum(touched_bytes(b, graph, precision, position) for b in spec.bindings if b.writable)
    macs = spec.macs or 0
    if spec.variants is not None and spec.decomposition is not None:
        d = spec.decomposition
        active = max(1, min(invocations, int(spec.variants.active(d))))
        work_at = spec.variants.work_at
        work = float(work_at(d, position) if work_at is not None and position is not None else spec.variants.work(d))
    else:
        d = None
        active = max(1, min(invocations, int(np.prod(spec.grid))))
        # No decomposition: one invocation loads its share of what the dispatch reads and does its share of
        # the multiply-adds, in vec4s (kernels/tiling.py's units).
        work = tiling.OVERHEAD + tiling.LOAD * read / 16 / active + macs / 4 / active
    return DispatchCost(invocations, active, groups, work, read, written, macs or read // 4,
                        d.split if d else 1, split_barriers(d, spec.variants), lane_memory(d),
                        split_shuffles(d, spec.variants), spec.label, spec.shader)

def predict_specs(partitions: list[list[KernelSpec]], graph: Graph, device: Device,
                  precision: str = "fp32", position: int | None = None) -> ModelPrediction:
    rows = []
    for specs in partitions:
        for spec in specs:
            cost = dispatch_cost(spec, graph, precision, position)
            rows.append((cost, predict_ns(cost, device), floor_ns(cost, device)))
    return ModelPrediction(device, rows)


def op_ns(op: Any, graph: Graph, device: Device, precision: str = "fp32") -> tuple[float, int]:
    """(Predicted ns, dispatches) of one op lowered alone, each dispatch in the decomposition predicted fastest on
    `device`, with the host's recording of each (what a fusion trading a dispatch for recomputation weighs)."""
    from ...latency.policy import choose
    from ...latency.target import named
    from . import registry

    target = named(device.target)
    total, count = 0.0, 0
    for item in registry.kernel_for(op).build(op, graph):
        if isinstance(item, Variants):
            item = item.resolve(choose(item, target, device))
        if isinstance(item, KernelSpec):
            total += predict_ns(dispatch_cost(item, graph, precision), device) + device.record_ns
            count += 1
    return total, count
