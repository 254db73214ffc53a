"""What a device offers kernels: its optional features and its limits, and the two device profiles the engine opens.

"full" (the default) asks the adapter for every optional feature the engine uses (ENGINE_FEATURES) and the
adapter's own limits; "baseline" asks for no feature and WebGPU's default limits (DEFAULT_LIMITS), which every
conformant adapter offers, as many integrated and mobile GPUs do and nothing more. Kernel choice and the checks
before submit read the device's actual `DeviceLimits` (from the opened device), and planning without a device
reads BASELINE, so a plan made for reports fits any adapter.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .. import settings

PROFILES = ("full", "baseline")
# the optional features the engine uses where the device has them: timestamps (profile, bench), f16 storage and
# arithmetic (precision="fp16"), subgroup shuffles (split reductions)
ENGINE_FEATURES = ("timestamp-query", "timestamp-query-inside-passes", "shader-f16", "subgroup")
# WebGPU's default limits (the specification's "Limits" table) that compute work meets; a "baseline" device is
# opened with exactly these.
DEFAULT_LIMITS: dict[str, int] = {
    "max-bind-groups": 4,
    "max-bindings-per-bind-group": 1000,
    "max-storage-buffers-per-shader-stage": 8,
    "max-uniform-buffers-per-shader-stage": 12,
    "max-storage-buffer-binding-size": 128 << 20,
    "max-uniform-buffer-binding-size": 64 << 10,
    "max-buffer-size": 256 << 20,
    "min-storage-buffer-offset-alignment": 256,
    "min-uniform-buffer-offset-alignment": 256,
    "max-dynamic-storage-buffers-per-pipeline-layout": 4,
    "max-dynamic-uniform-buffers-per-pipeline-layout": 8,
    "max-compute-workgroup-storage-size": 16 << 10,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroups-per-dimension": 65535,
}
# the limits a "full" device raises to the adapter's own
RAISED_LIMITS = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
                 "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                 "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z")


@dataclass(frozen=True)
class DeviceLimits:
    """The limits kernels must stay within, read from a device (or the defaults, for planning without one)."""

    storage_buffers: int  # storage buffers one compute shader binds
    storage_binding_bytes: int  # bytes of one storage binding
    buffer_bytes: int  # bytes of one buffer
    workgroup_storage_bytes: int  # workgroup memory one shader declares
    invocations: int  # invocations per workgroup
    workgroup_size: tuple[int, int, int]  # per dimension
    workgroups_per_dimension: int
    f16: bool = False  # the shader-f16 feature
    subgroups: bool = False  # the subgroup feature

    @classmethod
    def of(cls, limits: Mapping[str, int], features: Collection[str] = ()) -> DeviceLimits:
        """A device's limits from wgpu's `device.limits` (names as in DEFAULT_LIMITS; a missing one counts as
        WebGPU's default) and its features."""
        def get(name: str) -> int:
            return int(limits.get(name, DEFAULT_LIMITS[name]))

        return cls(get("max-storage-buffers-per-shader-stage"), get("max-storage-buffer-binding-size"),
                   get("max-buffer-size"), get("max-compute-workgroup-storage-size"),
                   get("max-compute-invocations-per-workgroup"),
                   (get("max-compute-workgroup-size-x"), get("max-compute-workgroup-size-y"),
                    get("max-compute-workgroup-size-z")),
                   get("max-compute-workgroups-per-dimension"), "shader-f16" in features, "subgroup" in features)

    def describe(self) -> str:
        """One line for reports: the limits kernels meet and the features they may use."""
        features = [name for name, on in (("shader-f16", self.f16), ("subgroup", self.subgroups)) if on]
        return (f"{self.storage_buffers} storage buffers/stage, {self.storage_binding_bytes >> 20} MiB/binding, "
                f"{self.buffer_bytes >> 20} MiB/buffer, {self.workgroup_storage_bytes >> 10} KiB workgroup memory, "
                f"{self.invocations} invocations/workgroup; features: {', '.join(features) or 'none'}")


BASELINE = DeviceLimits.of(DEFAULT_LIMITS)


def check_profile(preference: str | None) -> str:
    """The device profile asked for (argument, else env GPUENGINE_DEVICE, else "full"); ValueError otherwise."""
    value = (preference or settings.get(settings.DEVICE) or "full").strip().lower()
    if value not in PROFILES:
        source = "device_profile" if preference else "GPUENGINE_DEVICE"
        raise ValueError(f"{source} {value!r} is not one of {', '.join(PROFILES)}")
    return value
