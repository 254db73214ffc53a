"""Whether a dispatch fits a device's limits (latency/limits.py DeviceLimits), checked before anything is submitted:
wgpu-native aborts the process on a validation error at queue.submit, and does not check every limit at pipeline
creation (it accepts a shader declaring more workgroup memory than the device's limit), so the engine checks them
all itself, naming the kernel and the limit. The runtime checks every program it builds (runtime/program.py); tests
check the plans of whole models against WebGPU's defaults without a device.
"""

from __future__ import annotations

import re

import numpy as np

from ..latency.limits import DeviceLimits
from ..model.ir import Graph
from . import codegen
from .fusion import SPLIT_TO_FIT
from .kernels.base import Binding, KernelSpec
from .kernels.dispatch_cost import binding_bytes, stored_as_f16
from .kernels.tiling import WORKGROUP_VARIABLE, workgroup_memory_bytes

WORKGROUP_DECLARATION = re.compile(r"var<workgroup>")
SUBGROUP_USE = re.compile(r"\bsubgroup\w*\s*\(|@builtin\(subgroup_")
F16_USE = re.compile(r"\bf16\b")


def stored_data(b: Binding, precision: str) -> np.ndarray:
    """A constant binding's bytes as the shader reads them (stored_as_f16)."""
    data = np.ascontiguousarray(b.data)
    return data.astype(np.float16) if stored_as_f16(b, precision) else data


def violations(spec: KernelSpec, limits: DeviceLimits, graph: Graph, precision: str,
               source: str | None = None) -> list[str]:
    """Every way the dispatch exceeds the limits, one sentence each naming the kernel and the limit (empty when it
    fits). source: its WGSL (rendered here when not given), for the workgroup memory it declares."""
    what = f"kernel {spec.shader} ({spec.label or 'op ' + str(spec.ops)})"
    out = []
    wg = spec.workgroup
    if wg is None or min(wg) < 1 or wg[0] * wg[1] * wg[2] > limits.invocations:
        out.append(f"{what}: workgroup {wg} exceeds the device's {limits.invocations} invocations per workgroup")
    elif any(w > m for w, m in zip(wg, limits.workgroup_size)):
        out.append(f"{what}: workgroup {wg} exceeds the device's workgroup size {limits.workgroup_size}")
    else:
        groups = codegen.dispatch_size(spec)
        if max(groups) > limits.workgroups_per_dimension:
            out.append(f"{what}: grid {spec.grid} needs {groups} workgroups, more than the device allows per "
                       f"dimension ({limits.workgroups_per_dimension})")
    bound = codegen.bound(spec)
    if len(bound) > limits.storage_buffers:
        out.append(f"{what}: binds {len(bound)} storage buffers, more than the device's "
                   f"{limits.storage_buffers} per shader stage")
    for b in bound:
        size = binding_bytes(b, graph, precision)
        if size > limits.storage_binding_bytes:
            out.append(f"{what}: binding {b.name} of {size} bytes exceeds the device's storage binding limit of "
                       f"{limits.storage_binding_bytes} bytes")
    text = source if source is not None else codegen.render(spec, precision)
    return out + source_violations(text, limits, what)


def source_violations(text: str, limits: DeviceLimits, what: str) -> list[str]:
    """What a WGSL module itself asks beyond the limits: workgroup memory, and features (subgroup operations, f16)
    the device lacks."""
    out = []
    declared = len(WORKGROUP_DECLARATION.findall(text))
    if declared:
        memory = workgroup_memory_bytes(text)
        if len(WORKGROUP_VARIABLE.findall(text)) != declared:
            out.append(f"{what}: declares workgroup memory of a size the engine cannot check (gpuengine bug)")
        elif memory > limits.workgroup_storage_bytes:
            out.append(f"{what}: declares {memory} bytes of workgroup memory, more than the device's "
                       f"{limits.workgroup_storage_bytes}")
    if not limits.subgroups and SUBGROUP_USE.search(text):
        out.append(f"{what}: uses subgroup operations, which the device lacks (no `subgroup` feature)")
    if not limits.f16 and F16_USE.search(text):
        out.append(f"{what}: uses f16, which the device lacks (no `shader-f16` feature)")
    return out


def variant_notes(specs: list[KernelSpec], limits: DeviceLimits) -> list[str]:
    """What the device's features changed in the kernel choice, for reports: how split reductions combine (subgroup
    shuffles, or workgroup memory where the device lacks the subgroup feature), and the KV cache writes lowered as
    separate dispatches because one would bind more storage buffers than the device allows (lowering/fusion.py)."""
    notes = []
    separate = sum(SPLIT_TO_FIT in s.label for s in specs)
    if separate:
        notes.append(f"{separate} KV cache writes / query rotations (and QKV projections they would be the epilogue "
                     f"of) as their own dispatches (one shared dispatch "
                     f"would bind more than the device's {limits.storage_buffers} storage buffers)")
    splits = [s for s in specs if s.decomposition is not None and s.decomposition.split > 1]
    if not splits:
        return notes
    if limits.subgroups:
        shuffled = sum(s.decomposition.subgroup for s in splits)
        return [*notes, f"{len(splits)} split reductions: {shuffled} through subgroup shuffles, "
                f"{len(splits) - shuffled} through workgroup memory"]
    return [*notes, f"{len(splits)} split reductions through workgroup memory (no subgroup feature)"]
