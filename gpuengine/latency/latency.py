"""A latency model of each dispatch, after LASNet (Han et al., "Latency-aware Spatial-wise Dynamic Networks"):
FLOPs do not predict a GPU's time; a model of the hardware, the layer and how its work maps onto the units does.

A dispatch is described by its decomposition (`DispatchCost`: invocations launched and active, workgroups, the
work of one invocation in lowering/kernels/tiling.py's cost units, bytes read and written, multiply-adds, the split's
barriers, subgroup shuffles and workgroup memory, the template), all derived from a KernelSpec generically
(bindings' sizes, the Variants' callbacks: lowering/kernels/dispatch_cost.py), so a new kernel needs no edit here. A
device (`Device`, latency/devices.py) has `units` compute units of `lanes` lanes each, a clock, a memory
bandwidth and cache, and fixed costs. One dispatch takes

    dispatch_ns                                   (the dependent-dispatch barrier of a chain)
  + max(compute, memory)                          (LASNet: data movement against computation)
  + workgroups x workgroup_ns / units             (launching workgroups, spread over the units)

    compute = (work x unit_ns x efficiency[template] + barriers x barrier_ns + shuffles x shuffle_ns
               + invocation_ns + stores x store_ns) x waves       (stores: output vec4s per busy invocation)
    waves   = max(1, active invocations (whole SIMD groups of `lanes`) / (units x lanes))
    memory  = bytes / bandwidth   (bytes within the cache at `cache_speedup` times the bandwidth)

Below one wave the device has idle lanes and time is one invocation's latency; above, the device is full and time
grows with the total work. A model's time is the sum of its dispatches plus its fixed costs (the submit and
readback round trip, host recording per dispatch). Its floor is what no schedule can beat: per dispatch the larger
of its bytes moved once (memory's rule above) and 2 x multiply-adds / peak FLOPs, plus the chain's dispatch
barriers; a prediction is never below it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the model reads kernels' decompositions without depending on the kernels
    from ..lowering.kernels.base import Decomposition, Variants

# The parameters calibrate.py fits from measurements (the rest of a Device comes from its published figures).
FITTED = ("unit_ns", "invocation_ns", "store_ns", "shuffle_ns", "dispatch_ns", "workgroup_ns", "barrier_ns",
          "bandwidth_gbs")


@dataclass(frozen=True)
class Device:
    """What the model needs of a device. Figures are published ones for built-in descriptions, fitted ones
    (FITTED) after `gpuengine calibrate`."""

    name: str
    units: int  # compute units (multiprocessors, execution units, CPU cores)
    lanes: int  # invocations one unit advances at once (SIMD width x issue)
    clock_ghz: float
    bandwidth_gbs: float  # memory bandwidth, GB/s
    cache_bytes: int  # last-level cache
    unit_ns: float  # ns one lane spends on one cost unit (lowering/kernels/tiling.py) when latency-bound
    dispatch_ns: float  # GPU time a dependent dispatch adds (the barrier between dispatches)
    workgroup_ns: float  # launching one workgroup on a unit
    barrier_ns: float  # one workgroup barrier (split reductions through workgroup memory)
    submit_ns: float  # one submit + readback map round trip
    record_ns: float  # host time to record one dispatch (set_pipeline + set_bind_group + dispatch), wgpu-py's API
    invocation_ns: float = 0.0  # what one invocation costs its lane besides its work (start, index math, exit)
    store_ns: float = 0.0  # storing one output vec4 (bounds check, fused epilogue, the write)
    shuffle_ns: float = 0.0  # one vec4 through one level of a subgroup reduction
    cache_speedup: float = 3.0  # cache bandwidth / memory bandwidth
    # host time to record one dispatch through wgpu-native's C functions (runtime/program.py records that way where
    # the wgpu package exposes them); 0: not measured, record_ns stands for it
    record_raw_ns: float = 0.0
    # per template (KernelSpec.shader): how many times the generic cost of a work unit it takes (fitted; 1 if absent)
    efficiency: dict[str, float] = field(default_factory=dict)
    target: str = "discrete"  # the adapter class (latency/target.py) the description stands for
    source: str = "published figures"  # or "fitted on <adapter> (<n> dispatches)"

    @property
    def peak_gflops(self) -> float:
        """Fused multiply-add throughput: 2 FLOPs per lane per clock."""
        return 2.0 * self.units * self.lanes * self.clock_ghz

    @property
    def recording_ns(self) -> float:
        """Host time the runtime spends recording one dispatch (its C path where measured)."""
        return self.record_raw_ns or self.record_ns

    @property
    def concurrent(self) -> int:
        return self.units * self.lanes

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Device:
        names = {f.name for f in dataclasses.fields(Device)}
        return Device(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class DispatchCost:
    """The decomposition of one dispatch, as the model sees it."""

    invocations: int  # launched, in whole workgroups
    active: int  # of those, the ones with work
    workgroups: int
    work: float  # cost units (lowering/kernels/tiling.py) of one active invocation
    bytes_read: int
    bytes_written: int
    macs: int
    split: int = 1
    barriers: int = 0  # workgroup barriers one invocation passes (shared-memory split reductions)
    workgroup_memory: int = 0  # bytes of workgroup memory one workgroup declares
    shuffles: int = 0  # vec4 subgroup shuffles one invocation does (levels x accumulators, subgroup splits)
    label: str = ""
    kernel: str = ""  # the template (KernelSpec.shader): a fitted device may know its efficiency

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


# -- features of a dispatch ---------------------------------------------------------------------------------
def split_barriers(d: Decomposition | None, variants: Variants | None = None) -> int:
    """Barriers of a workgroup-memory reduction tree over d.split invocations (as tiling.reduction_cost counts),
    or the kernel's own count (Variants.barriers) where its decomposition declares one."""
    own = variants.barriers(d) if variants is not None and variants.barriers is not None and d is not None else None
    if own is not None:
        return int(own)
    if d is None or d.split <= 1 or d.subgroup:
        return 0
    return int(math.log2(d.split)) + 2


def split_shuffles(d: Decomposition | None, variants: Variants | None = None) -> int:
    """Subgroup shuffles of a split's butterfly: one per level and accumulated vec4 (tiling.reduction_cost), or
    the kernel's own count (Variants.shuffles) where its decomposition declares one."""
    own = variants.shuffles(d) if variants is not None and variants.shuffles is not None and d is not None else None
    if own is not None:
        return int(own)
    if d is None or d.split <= 1 or not d.subgroup:
        return 0
    return int(math.log2(d.split)) * d.tile[0] * d.tile[1]


def lane_memory(d: Decomposition | None) -> int:
    """Workgroup memory of a split's reduction array (codegen.lane_placeholders), in bytes."""
    if d is None or d.split <= 1:
        return 0
    per = d.invocations_per_workgroup // (4 if d.subgroup else 1)
    return per * d.tile[0] * d.tile[1] * 16


def candidate_cost(variants: Variants, d: Decomposition, base: DispatchCost | None = None) -> DispatchCost:
    """The cost of another decomposition of a dispatch, from its Variants alone (nothing is built): bytes are
    those of `base` (a decomposition changes how a dispatch reads, not what); its template the candidate's own
    where the kernel names it (Variants.template), else the base's."""
    invocations = int(variants.invocations(d))
    per = d.invocations_per_workgroup
    return DispatchCost(invocations, max(1, min(invocations, int(variants.active(d)))), max(1, invocations // per),
                        float(variants.work(d)), base.bytes_read if base else 0, base.bytes_written if base else 0,
                        variants.macs, d.split, split_barriers(d, variants), lane_memory(d),
                        split_shuffles(d, variants), base.label if base else "",
                        variants.template(d) if variants.template is not None else base.kernel if base else "")


# -- the model ----------------------------------------------------------------------------------------------
def waves(cost: DispatchCost, device: Device) -> float:
    """Rounds of the device's lanes the busy invocations need, counted in whole SIMD groups of `lanes`: an idle
    invocation sharing a group with busy ones holds its lane as long as they do; one in an idle group exits at
    once. (Limiting the units to the workgroups' count, one workgroup per unit, fit lavapipe's measurements worse:
    24 % against 21 % median held-out error.)"""
    busy = min(cost.invocations, math.ceil(cost.active / device.lanes) * device.lanes)
    return max(1.0, busy / device.concurrent)


def memory_ns(cost: DispatchCost, device: Device) -> float:
    """Moving the dispatch's bytes: what fits in the cache at cache speed, the rest at memory bandwidth."""
    cached = min(cost.bytes, device.cache_bytes)
    return (cached / device.cache_speedup + (cost.bytes - cached)) / device.bandwidth_gbs


def compute_ns(cost: DispatchCost, device: Device) -> float:
    stores = cost.bytes_written / 16 / cost.active  # output vec4s an invocation stores
    per_invocation = (cost.work * device.unit_ns * device.efficiency.get(cost.kernel, 1.0)
                      + cost.barriers * device.barrier_ns + device.invocation_ns
                      + stores * device.store_ns + cost.shuffles * device.shuffle_ns)
    return per_invocation * waves(cost, device)


def predict_ns(cost: DispatchCost, device: Device) -> float:
    """Predicted GPU time of one dispatch in a chain of dependent dispatches (never below its floor)."""
    launch = cost.workgroups * device.workgroup_ns / device.units
    modelled = device.dispatch_ns + max(compute_ns(cost, device), memory_ns(cost, device)) + launch
    return max(modelled, floor_ns(cost, device))


def floor_ns(cost: DispatchCost, device: Device) -> float:
    """What no decomposition can beat: the dispatch's bytes moved once (at cache speed what fits in the cache),
    or its multiply-adds at peak FLOPs, and the dispatch barrier."""
    return device.dispatch_ns + max(memory_ns(cost, device), 2.0 * cost.macs / device.peak_gflops)


def rank(variants: Variants, candidates: list[Decomposition], device: Device,
         base: DispatchCost | None = None) -> list[tuple[float, Decomposition]]:
    """Candidates by predicted time, fastest first (ties: fewer invocations)."""
    scored = [(predict_ns(candidate_cost(variants, d, base), device), variants.invocations(d), i, d)
              for i, d in enumerate(candidates)]
    return [(ns, d) for ns, _, _, d in sorted(scored)]


@dataclass
class ModelPrediction:
    """A model's predicted time: its dispatches, its fixed costs, its floor."""

    device: Device
    dispatches: list[tuple[DispatchCost, float, float]]  # (cost, predicted ns, floor ns)

    @property
    def gpu_ns(self) -> float:
        return sum(p for _, p, _ in self.dispatches)

    @property
    def fixed_ns(self) -> float:
        """Per invoke, besides the GPU's work: the submit + readback round trip and recording the dispatches."""
        return self.device.submit_ns + self.host_ns

    @property
    def total_ns(self) -> float:
        return self.gpu_ns + self.fixed_ns

    @property
    def floor_ns(self) -> float:
        """GPU floor: every dispatch's floor (its bytes or FLOPs at peak, its barrier in the chain)."""
        return sum(f for _, _, f in self.dispatches)

    @property
    def ratio(self) -> float:
        """How many times the floor the plan is predicted to take on the GPU."""
        return self.gpu_ns / self.floor_ns if self.floor_ns > 0 else math.inf

    @property
    def host_ns(self) -> float:
        """Host time to record one invoke: every dispatch at the device's recording cost (Device.recording_ns)."""
        return self.device.recording_ns * len(self.dispatches)

    @property
    def steps_per_s(self) -> float:
        """Invokes per second with several in flight (a decode loop's steps): the host records one while the GPU
        runs another, so the slower of the two sets the pace: min(GPU, host)."""
        slowest = max(self.gpu_ns, self.host_ns)
        return 1e9 / slowest if slowest > 0 else math.inf


def with_parameters(device: Device, values: dict[str, float], source: str,
                    efficiency: dict[str, float] | None = None) -> Device:
    extra = {"efficiency": efficiency} if efficiency is not None else {}
    return dataclasses.replace(device, **{k: float(v) for k, v in values.items()}, source=source, **extra)
