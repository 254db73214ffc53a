"""Built-in device descriptions for the latency model (latency/latency.py), and the fitted ones `gpuengine
calibrate` saves beside the tuning cache (one per adapter key).

Published figures: compute units, lanes, boost clock, memory bandwidth, last-level cache. The per-lane cost of a
work unit and the fixed costs were measured on an NVIDIA H100 (../shared/perf/h100, kept in
tests/fixtures/h100): 7.7 clock cycles per cost unit when latency-bound (MobileNet v2's 7x7 960 -> 160 1x1
conv unsplit: 207 us for 53,760 units), 2.2 us per dependent dispatch, 0.19-0.26 ms per submit and readback,
6.8 us of Python per recorded dispatch through wgpu-py's API and 3.4 us through wgpu-native's C functions (the
runtime's path; issue 32's figure from the same host). The other GPUs take the same cycles per unit at their own
clock and the H100's fixed costs: an estimate until a fit (`gpuengine calibrate`) replaces it. lavapipe's figures
were fitted on the dev box (2 cores) and scale with the host's cores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .. import settings
from .latency import Device
from .target import Target

CYCLES_PER_UNIT = 7.7  # H100, latency-bound (see the module docstring)
H100_FIXED = {"dispatch_ns": 2230.0, "workgroup_ns": 20.0, "barrier_ns": 20.0, "invocation_ns": 20.0,
              "store_ns": 20.0, "shuffle_ns": 4.0, "submit_ns": 220_000.0, "record_ns": 6830.0, "record_raw_ns": 3400.0}


def _gpu(name: str, units: int, lanes: int, clock_ghz: float, bandwidth_gbs: float, cache_mib: float,
         target: str) -> Device:
    return Device(name, units, lanes, clock_ghz, bandwidth_gbs, int(cache_mib * 2**20),
                  unit_ns=CYCLES_PER_UNIT / clock_ghz, target=target, **H100_FIXED)


BUILT_IN: dict[str, Device] = {
    # NVIDIA H100 SXM5 80GB: 132 SMs x 128 FP32 lanes, 1.98 GHz boost, 3.35 TB/s HBM3, 50 MiB L2.
    "h100": _gpu("h100", 132, 128, 1.98, 3350.0, 50, "discrete"),
    # NVIDIA GeForce RTX 4090: 128 SMs x 128 lanes, 2.52 GHz, 1008 GB/s, 72 MiB L2 (desktop, high end).
    "rtx4090": _gpu("rtx4090", 128, 128, 2.52, 1008.0, 72, "discrete"),
    # NVIDIA GeForce RTX 3060: 28 SMs x 128 lanes, 1.78 GHz, 360 GB/s, 3 MiB L2 (desktop, mid range).
    "rtx3060": _gpu("rtx3060", 28, 128, 1.78, 360.0, 3, "discrete"),
    # Apple M1 GPU (8 cores): 8 x 128 lanes, 1.28 GHz, 68 GB/s LPDDR4X, 8 MiB system cache (laptop).
    "apple-m1": _gpu("apple-m1", 8, 128, 1.28, 68.0, 8, "integrated"),
    # Intel Iris Xe (96 EUs): 96 x 8 lanes, 1.35 GHz, 68 GB/s LPDDR4X, 12 MiB LLC shared with the CPU (laptop).
    "iris-xe": _gpu("iris-xe", 96, 8, 1.35, 68.0, 12, "integrated"),
}


def lavapipe(cores: int | None = None) -> Device:
    """Mesa's lavapipe: a Vulkan device on the host's CPU cores. 4 lanes per core: the dev box's measurements fit
    better with 4 than with AVX2's 8 f32 lanes (held-out median error 15-21 % against 21-24 %). The costs were
    fitted there (`gpuengine calibrate`, 2 cores) while other jobs loaded it, then scaled by 0.63 so that whole
    models match the GPU times measured on the unloaded box (README: MobileNet v2 493 ms, selfie_segmentation
    150 ms, ...; the fit alone predicted 1.35-1.75x those). The rest is a typical desktop CPU. Recording a dispatch
    on the dev box (2026-11-26, SmolLM-shaped decode steps of 47 and 259 dispatches): 3.9-4.0 us through wgpu-py's
    API, 1.6-1.8 us through wgpu-native's C functions (about 0.9 us of Python and cffi, the rest in the command
    buffer's finish), besides ~15 us per compute pass. Efficiencies of the general conv and the LASNet sparse
    kernels: fitted on the dev box (2026-11-26, `python scripts/dev/lasnet_bench.py --calibrate --runs 7 --turns 15`,
    load average 3.7-4.5 from other sessions, each sample the least of 15 turns: LASNet blocks 32x32x16, 64x64x16,
    32x32x32, their dense dispatches as the engine runs them and their sparse kernels at each S and 5 activation
    rates, 78 samples of these templates, median error 12 %, 114 % before; the general conv had been predicted 8-10x
    its measured time there). Efficiencies of the attention templates: fitted on the dev box (2026-11-26, `python
    scripts/dev/attention_fit.py --runs 7 --turns 3 --alternatives 5`, load average 1.0-1.5): ATTENTION alone at head
    dims 64 / 128 / 256, decode over 64-1024 keys, two short prefills and one over long rows, in the `discrete` and
    `cpu` choices and 5 other decompositions each, 96 samples, median error 363 % before, 47 % after (attention 261
    -> 55 %, attention_partials 113 -> 62 %, attention_lanes 416 -> 41 %: the key-groups-of-lanes form had been
    predicted up to 18x its measured time). Runs at load 2.7-3.4 without the long rows fitted 0.49 / 0.47 / 0.105."""
    return Device("lavapipe", cores or os.cpu_count() or 1, 4, 3.0, 20.0, 32 * 2**20, unit_ns=6.6,
                  dispatch_ns=12_600.0, workgroup_ns=1.0, barrier_ns=95.0, invocation_ns=1.0, store_ns=1.0,
                  shuffle_ns=50.0, submit_ns=250_000.0, record_ns=4_000.0, record_raw_ns=1_700.0,
                  efficiency={"conv2d": 0.11, "lasnet_block": 0.117, "lasnet_mask": 0.795, "attention": 0.34,
                              "attention_partials": 0.441, "attention_lanes": 0.09}, target="cpu",
                  source="fitted on lavapipe, dev box (2 cores)")


def built_in(name: str) -> Device:
    """A built-in description by name (ValueError naming the known ones otherwise)."""
    key = name.strip().lower()
    if key == "lavapipe":
        return lavapipe()
    if key not in BUILT_IN:
        raise ValueError(f"no built-in device {name!r}; known: {', '.join(names())}")
    return BUILT_IN[key]


def names() -> list[str]:
    return [*BUILT_IN, "lavapipe"]


# The description standing for an adapter class when the adapter itself has no fit.
FOR_TARGET = {"discrete": "h100", "integrated": "iris-xe", "cpu": "lavapipe"}


def for_target(target: Target | str) -> Device:
    return built_in(FOR_TARGET[target if isinstance(target, str) else target.name])


# -- fitted descriptions, beside the tuning cache ------------------------------------------------------------
def tuning_cache_path() -> Path:
    """Where the tuning cache (lowering/kernels/tuned.py) lives: ~/.cache/gpuengine/tuning.json, or the path in
    GPUENGINE_TUNE_CACHE."""
    env = settings.get(settings.TUNE_CACHE)
    return Path(env) if env else Path.home() / ".cache" / "gpuengine" / "tuning.json"


def fit_path(tuning_cache: str | os.PathLike | None = None) -> Path:
    """latency.json in the tuning cache's folder (GPUENGINE_LATENCY_FIT overrides it)."""
    env = settings.get(settings.LATENCY_FIT)
    if env:
        return Path(env)
    return (Path(tuning_cache) if tuning_cache else tuning_cache_path()).parent / "latency.json"


def load_fits(path: str | os.PathLike) -> dict[str, Device]:
    """{adapter key: fitted Device} from a fit file; an unreadable or malformed file holds none."""
    try:
        data = json.loads(Path(path).read_text())
        return {k: Device.from_json(v) for k, v in data.get("devices", {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def load_fit(path: str | os.PathLike, adapter_key: str | None = None) -> Device:
    """The fitted description for an adapter key (or the file's only one); ValueError when there is none."""
    fits = load_fits(path)
    if adapter_key is not None and adapter_key in fits:
        return fits[adapter_key]
    if adapter_key is None and len(fits) == 1:
        return next(iter(fits.values()))
    known = ", ".join(fits) or "none"
    raise ValueError(f"{path}: no fitted device{' for ' + repr(adapter_key) if adapter_key else ''} (holds: {known})")


def save_fit(path: str | os.PathLike, adapter_key: str, device: Device, report: dict[str, Any]) -> None:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
            raise ValueError
    except (OSError, ValueError):
        data = {"format": 1, "devices": {}, "reports": {}}
    data["devices"][adapter_key] = device.to_json()
    data.setdefault("reports", {})[adapter_key] = report
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
