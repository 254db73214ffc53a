"""Per-adapter JSON cache of tuned decompositions and workgroup sizes, keyed by adapter and kernel: the part the
runtime reads while lowering (`gpuengine tune` writes it: tuning/cache.py).

Default location ~/.cache/gpuengine/tuning.json; GPUENGINE_TUNE_CACHE overrides it. Format 2:
{"format": 2, "devices": {<adapter key>: {"adapter": <name>, "kernels": {<key>: <entry>}}}}, where <key> is a
decomposable dispatch's problem (kernels/tiling.py) with entry {"decomposition": {"tile": [a, b], "split": k,
"group": g, "subgroup": bool}, "default_ns": float, "tuned_ns": float}, or another dispatch's signature
(GpuProgram.signature) with entry {"workgroup": [x, y, z], "default_ns": ..., "tuned_ns": ...}. Caches of an
older format are ignored (their keys no longer describe today's kernels) and replaced on the next save.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...latency.devices import fit_path, load_fits, tuning_cache_path
from .base import Decomposition

FORMAT = 2
Workgroup = tuple[int, int, int]


@dataclass
class Tuned:
    """What the cache holds for one adapter, as GpuProgram takes it."""

    decompositions: dict[str, Decomposition] = field(default_factory=dict)
    workgroups: dict[str, Workgroup] = field(default_factory=dict)
    latency: Any = None  # the adapter's fitted latency.Device (`gpuengine calibrate`, latency.json beside the cache)


class TuningCache:
    """The cache file, read (tuning/cache.py adds recording and saving for `gpuengine tune`)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path else tuning_cache_path()
        self.data: dict[str, Any] = {"format": FORMAT, "devices": {}}
        if self.path.is_file():
            try:
                loaded = json.loads(self.path.read_text())
            except (OSError, ValueError):
                loaded = None  # a corrupt cache is ignored (and replaced on the next save), never fatal
            if isinstance(loaded, dict) and loaded.get("format") == FORMAT and isinstance(loaded.get("devices"), dict):
                self.data = loaded

    def tuned(self, device_key: str) -> Tuned:
        """The valid entries for one adapter (malformed ones are skipped)."""
        device = self.data["devices"].get(device_key, {})
        kernels = device.get("kernels", {}) if isinstance(device, dict) else {}
        out = Tuned(latency=load_fits(fit_path(self.path)).get(device_key))
        for key, entry in kernels.items() if isinstance(kernels, dict) else ():
            if not isinstance(entry, dict):
                continue
            if "decomposition" in entry:
                d = Decomposition.from_json(entry["decomposition"])
                if d is not None:
                    out.decompositions[key] = d
                continue
            wg = entry.get("workgroup")
            if isinstance(wg, list) and len(wg) == 3 and all(isinstance(v, int) and v > 0 for v in wg):
                out.workgroups[key] = (wg[0], wg[1], wg[2])
        return out
