"""Per-adapter JSON cache of tuned workgroup sizes, keyed by adapter identity and kernel signature.

Default location ~/.cache/gpuengine/tuning.json; GPUENGINE_TUNE_CACHE overrides it. Format:
{"format": 1, "devices": {<adapter key>: {"adapter": <name>, "kernels": {<signature>: {"workgroup": [x, y, z],
 "default_ns": float, "tuned_ns": float}}}}}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

FORMAT = 1


def default_path() -> Path:
    env = os.environ.get("GPUENGINE_TUNE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gpuengine" / "tuning.json"


class TuningCache:
    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path else default_path()
        self.data: dict[str, Any] = {"format": FORMAT, "devices": {}}
        if self.path.exists():
            try:
                loaded = json.loads(self.path.read_text())
            except (OSError, ValueError):
                loaded = None  # a corrupt cache is ignored (and replaced on the next save), never fatal
            if isinstance(loaded, dict) and loaded.get("format") == FORMAT and isinstance(loaded.get("devices"), dict):
                self.data = loaded

    def workgroups(self, device_key: str) -> dict[str, tuple[int, int, int]]:
        """signature -> tuned workgroup for one adapter (what GpuProgram takes)."""
        kernels = self.data["devices"].get(device_key, {}).get("kernels", {})
        out = {}
        for sig, entry in kernels.items():
            wg = entry.get("workgroup") if isinstance(entry, dict) else None
            if isinstance(wg, list) and len(wg) == 3 and all(isinstance(v, int) and v > 0 for v in wg):
                out[sig] = (wg[0], wg[1], wg[2])
        return out

    def record(self, device_key: str, adapter: str, signature: str, workgroup: tuple[int, int, int],
               default_ns: float, tuned_ns: float) -> None:
        device = self.data["devices"].setdefault(device_key, {"adapter": adapter, "kernels": {}})
        device["kernels"][signature] = {"workgroup": list(workgroup), "default_ns": float(default_ns),
                                        "tuned_ns": float(tuned_ns)}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tuning-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
