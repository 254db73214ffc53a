"""Adapter and device choice: prefer a hardware GPU, fall back to a software one with a notice."""

from __future__ import annotations

import logging
import threading
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .. import settings
from ..errors import AdapterError
from ..latency.limits import DEFAULT_LIMITS, ENGINE_FEATURES, RAISED_LIMITS, DeviceLimits, check_profile
from ..latency.target import Target, resolve
from . import webgpu as implementations

INSTALL_HINT = (
    "Install a GPU driver with Vulkan, Metal or D3D12 support, or a software WebGPU adapter: on Debian/Ubuntu "
    "`sudo apt-get install mesa-vulkan-drivers` (lavapipe). `gpuengine inspect` then lists the adapter it uses."
)
WANTED_FEATURES = ENGINE_FEATURES  # by the engine's names (webgpu.native_features gives each implementation's)
DEVICE_LOST = ("the GPU device was lost (driver reset, adapter removed, or device destroyed); call "
               "allocate_tensors() to recreate it and compile the model again")
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}


@dataclass
class GpuDevice:
    adapter: Any
    device: Any
    features: frozenset[str]
    limits: dict[str, int]
    pipelines: dict[str, Any] = field(default_factory=dict)  # WGSL text -> compute pipeline, shared by programs
    # kernel name -> its parametric versions (lowering/parametric.py): one compile for the sizes that match one
    parametric: dict[str, list[Any]] = field(default_factory=dict)
    lost: bool = False
    _probe: Any = None
    orphans: list[Any] = field(default_factory=list)  # command buffers of collected programs, to submit
    # "full" (the adapter's features and limits), "baseline" (none and WebGPU's defaults: latency/limits.py) or
    # "given" (a device the application opened: its own)
    profile: str = "full"
    webgpu: str = "wgpu"  # the implementation (runtime/webgpu.py): what WGSL is rendered for
    compile_only: bool = False  # Dawn's Null device: compiles shaders, runs nothing (running says so)

    def submit_orphans(self) -> None:
        """Submit what collected programs recorded in advance (runtime/program.py _orphan_recorded), from a
        caller of the engine: their work is harmless (it only writes those programs' own buffers) and a
        finished command buffer that is never submitted leaks in wgpu-native. Dropped on a lost device, where a
        submit would abort the process."""
        pending, self.orphans[:] = list(self.orphans), []
        if pending and self.alive():
            self.device.queue.submit(pending)

    def poll(self) -> None:
        """Deliver the callbacks of finished GPU work now, in this thread, without blocking (wgpu-native): a map
        whose copy is done resolves at once instead of through wgpu's poll thread, a hand-over between threads at
        every read (which waits for a free core on a loaded machine). Elsewhere nothing."""
        if self.webgpu != "wgpu" or self.compile_only:
            return
        from wgpu.backends.wgpu_native._api import ffi, lib

        lib.wgpuDevicePoll(self.device._internal, False, ffi.NULL)  # noqa: SLF001 - no public poll in wgpu 0.32

    def write(self, buffer: Any, offset: int, value: Any) -> None:
        """Write host bytes into a buffer through the queue (ordered before the next submission)."""
        self.device.queue.write_buffer(buffer, offset, value)

    def copy(self, pairs: list[tuple[Any, Any]]) -> None:
        """Copy each (source, destination) buffer pair on the GPU (as many bytes as the smaller holds), in one
        submission."""
        encoder = self.device.create_command_encoder()
        for source, destination in pairs:
            encoder.copy_buffer_to_buffer(source, 0, destination, 0, min(source.size, destination.size))
        self.device.queue.submit([encoder.finish()])

    def alive(self) -> bool:
        """False once the device is lost. wgpu 0.32 only logs a loss, and a submit on a lost device aborts the
        process, so this asks the device itself: a 4-byte write raises once it is gone."""
        if self.lost:
            return False
        import wgpu

        try:
            if self._probe is None:
                self._probe = self.device.create_buffer(size=16, usage=wgpu.BufferUsage.COPY_DST)
            self.device.queue.write_buffer(self._probe, 0, b"\0\0\0\0")
        except Exception:  # noqa: BLE001 - wgpu's validation error ("Parent device is lost"), whatever its type
            self.lost = True
        return not self.lost

    @property
    def name(self) -> str:
        return self.adapter.summary

    def check_runs(self) -> None:
        """AdapterError where the device runs nothing (Dawn's Null backend), before any submit."""
        if self.compile_only:
            raise AdapterError(implementations.COMPILE_ONLY)

    @property
    def is_software(self) -> bool:
        return self.adapter.info.get("adapter_type") == "CPU"

    @property
    def device_limits(self) -> DeviceLimits:
        """The limits and features kernels must keep to on this device (lowering/device_fit.py checks them)."""
        return DeviceLimits.of(self.limits, self.features)

    def describe(self) -> str:
        """One line for reports: the profile it was opened with, its limits and the features kernels may use."""
        return f"{self.profile} profile: {self.device_limits.describe()}"

    @property
    def storage_alignment(self) -> int:
        return int(self.limits.get("min-storage-buffer-offset-alignment", 256))

    def precision(self, requested: str) -> str:
        """The precision a program runs in: fp16 needs the adapter's `shader-f16` feature; without it, fp32 and
        a warning (the results stay right, only memory and speed are those of fp32)."""
        if requested == "fp16" and "shader-f16" not in self.features:
            how = ("was opened without optional features (device profile 'baseline')" if self.profile == "baseline"
                   else "has no shader-f16 feature")
            warnings.warn(f"The device on {self.name!r} {how}: running in fp32 instead of fp16.",
                          RuntimeWarning, stacklevel=4)
            return "fp32"
        return requested

    def target(self, preference: str | None = None) -> Target:
        """The adapter class kernels decompose their work for: `preference` (or env GPUENGINE_TARGET) when
        given, else detected from the adapter (latency/target.py)."""
        return resolve(preference, self.adapter.info, self.features)

    def cache_key(self) -> str:
        """Identifies the adapter for per-device caches (tuning): name, backend and driver."""
        info = self.adapter.info
        key = "|".join(str(info.get(k, "")) for k in ("device", "backend_type", "description", "vendor_id"))
        return key + ("|baseline" if self.profile == "baseline" else "")


class WorkDone:
    """Set once the GPU has finished everything submitted to the device's queue before it was made.

    wgpu 0.32's own `on_submitted_work_done` passes a callback of the wrong signature to wgpu-native; this
    registers one of the right signature through its C API, and wgpu's poll thread delivers it."""

    def __init__(self, gpu: GpuDevice) -> None:
        self._event = threading.Event()
        if gpu.webgpu != "wgpu":  # Dawn's promise is right (wgpudawn implements it on webgpu.h's future)
            self._keep = gpu.device.queue.on_submitted_work_done_async().then(lambda _: self._event.set())
            return
        from wgpu.backends.wgpu_native._api import ffi, lib, new_struct

        device = gpu.device
        token = device._poller.get_token()  # noqa: SLF001 - keeps wgpu's poll thread polling until we are done

        @ffi.callback("void(WGPUQueueWorkDoneStatus, WGPUStringView, void *, void *)")
        def callback(status: Any, message: Any, user1: Any, user2: Any) -> None:
            token.set_done()
            self._event.set()
            # the cycle self -> _keep -> callback -> self is never collected (a cffi callback does not take part in
            # garbage collection): break it, the callback kept among the last ones run (not freed while it runs)
            _work_done_run.append(self._keep)
            self._keep = None

        info = new_struct("WGPUQueueWorkDoneCallbackInfo", mode=lib.WGPUCallbackMode_AllowProcessEvents,
                          callback=callback)
        self._keep = (callback, info, token)  # alive until the callback has run
        lib.wgpuQueueOnSubmittedWorkDone(device.queue._internal, info)  # noqa: SLF001

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


_work_done_run: deque[Any] = deque(maxlen=64)  # the last WorkDone callbacks that ran (older ones are freed)
_lock = threading.Lock()
_devices: dict[str, GpuDevice] = {}


_adapter_lock = threading.Lock()
_adapter_lists: dict[str, list[Any]] = {}  # implementation -> its adapters


def _adapters(fresh: bool = False, webgpu: str = "wgpu") -> list[Any]:
    """The adapters of an implementation, listed once per process (again with `fresh`, after a device was
    lost). One thread at a time: wgpu-native aborts when two threads enumerate adapters at once."""
    module = implementations.package(webgpu)
    with _adapter_lock:
        if fresh or webgpu not in _adapter_lists:
            try:
                _adapter_lists[webgpu] = list(module.gpu.enumerate_adapters_sync())
            except Exception as e:  # noqa: BLE001 - a broken loader or driver must become an actionable error
                raise AdapterError(f"WebGPU ({implementations.NAMES[webgpu]}) could not list adapters ({e}). "
                                   f"{INSTALL_HINT}") from e
        return list(_adapter_lists[webgpu])


def _rank(adapter: Any) -> tuple[int, int]:
    info = adapter.info
    return (1 if info.get("adapter_type") == "CPU" else 0, _BACKEND_RANK.get(info.get("backend_type"), 1))


_software_noted: set[str] = set()


def _note_software(summary: str) -> None:
    """Say once per process, in one line, that the engine runs on a software adapter: a log record of the
    `gpuengine` logger (Python prints an unconfigured logger's warnings to stderr as the bare message; an
    application silences it with logging.getLogger("gpuengine").setLevel(logging.ERROR))."""
    if summary in _software_noted:
        return
    _software_noted.add(summary)
    logging.getLogger("gpuengine").warning(
        "gpuengine: no hardware GPU adapter found; running on the software adapter %r (much slower)", summary)


def select_adapter(preference: str | None = None, fresh: bool = False, webgpu: str = "wgpu") -> Any:
    """Pick an adapter of implementation `webgpu`. preference: None/'auto' (env GPUENGINE_ADAPTER, else best),
    'hardware', 'software', or a case-insensitive substring of the adapter summary (e.g. 'nvidia', 'vulkan').
    Where Dawn finds no adapter, 'auto' gives its Null adapter: compile-only (GpuDevice.compile_only)."""
    preference = (preference or settings.get(settings.ADAPTER) or "auto").strip().lower()
    adapters = sorted(_adapters(fresh, webgpu), key=_rank)
    if not adapters and webgpu == "dawn" and preference == "auto":
        return implementations.null_adapter()
    if not adapters:
        raise AdapterError(f"No WebGPU adapter found ({implementations.NAMES[webgpu]}). {INSTALL_HINT}")
    names = [a.summary for a in adapters]
    if preference == "auto":
        chosen = adapters[0]
        if _rank(chosen)[0]:
            _note_software(chosen.summary)
        return chosen
    if preference in ("hardware", "gpu"):
        hw = [a for a in adapters if not _rank(a)[0]]
        if not hw:
            raise AdapterError(f"No hardware GPU adapter found (available: {names}). {INSTALL_HINT}")
        return hw[0]
    if preference in ("software", "cpu"):
        sw = [a for a in adapters if _rank(a)[0]]
        if not sw:
            raise AdapterError(f"No software adapter found (available: {names}). {INSTALL_HINT}")
        return sw[0]
    matches = [a for a in adapters if preference in a.summary.lower()]
    if not matches:
        raise AdapterError(f"No adapter matches {preference!r}; available: {names}. Pass adapter='auto', "
                           "'hardware', 'software' or part of one of those names (env GPUENGINE_ADAPTER).")
    return matches[0]


def gpu_for(device: Any) -> GpuDevice:
    """The GpuDevice of a wgpu device: one gpuengine made (get_device), or a user's own, wrapped once."""
    with _lock:
        for gpu in _devices.values():
            if gpu.device is device:
                return gpu
        key = f"device@{id(device)}"
        if key not in _devices or _devices[key].device is not device:
            webgpu = implementations.implementation_of(device)
            _devices[key] = GpuDevice(adapter=device.adapter, device=device,
                                      features=implementations.engine_features(webgpu, device.features),
                                      limits=dict(device.limits), profile="given", webgpu=webgpu,
                                      compile_only=implementations.is_null(device.adapter))
        return _devices[key]


def device_request(adapter: Any, profile: str, webgpu: str = "wgpu") -> tuple[list[str], dict[str, int]]:
    """The features (by the implementation's names) and limits a device of the profile asks the adapter for: every
    feature the engine uses and the adapter's own limits ("full"), or none and WebGPU's defaults ("baseline";
    wgpu-native otherwise hands out the adapter's limits, so they are asked for explicitly, and it then enforces
    them)."""
    if profile == "baseline":
        return [], {n: v for n, v in DEFAULT_LIMITS.items() if n in adapter.limits}
    return ([f for f in implementations.native_features(webgpu, WANTED_FEATURES) if f in adapter.features],
            {n: adapter.limits[n] for n in RAISED_LIMITS if n in adapter.limits})


def get_device(preference: str | None = None, profile: str | None = None, webgpu: str = "wgpu") -> GpuDevice:
    """One shared device per adapter, profile and implementation per process: devices are expensive and pipelines
    live on them. profile: "full" or "baseline" (latency/limits.py; None: env GPUENGINE_DEVICE, else "full")."""
    profile = check_profile(profile)
    implementations.check(webgpu)
    adapter = select_adapter(preference, webgpu=webgpu)
    suffix = "" if profile == "full" else f" [{profile}]"
    key = f"{webgpu}:{adapter.summary}{suffix}"
    with _lock:
        if key in _devices:
            if _devices[key].alive():
                return _devices[key]
            adapter = select_adapter(preference, fresh=True, webgpu=webgpu)  # lost: list the adapters anew
            key = f"{webgpu}:{adapter.summary}{suffix}"
        features, limits = device_request(adapter, profile, webgpu)
        try:
            device = adapter.request_device_sync(required_features=features, required_limits=limits)
        except Exception as e:  # noqa: BLE001
            raise AdapterError(f"Could not open a device on {adapter.summary!r} ({implementations.NAMES[webgpu]}, "
                               f"{profile} profile): {e}. {INSTALL_HINT}") from e
        gpu = GpuDevice(adapter=adapter, device=device, features=implementations.engine_features(webgpu, features),
                        limits=dict(device.limits), profile=profile, webgpu=webgpu,
                        compile_only=implementations.is_null(adapter))
        _devices[key] = gpu
        return gpu


def device_of(options: Any) -> GpuDevice:
    """The device engine options (options.EngineOptions) name: the one passed in, else the one gpuengine opens on
    their adapter with their device profile and WebGPU implementation."""
    if options.device is not None:
        return gpu_for(options.device)
    return get_device(options.adapter, options.device_profile, options.webgpu)

