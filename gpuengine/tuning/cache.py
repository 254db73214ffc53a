"""Per-adapter JSON cache of tuned decompositions and workgroup sizes, keyed by adapter and kernel: recording what
`gpuengine tune` measured and saving it (the runtime reads it through lowering/kernels/tuned.py).

The format and reading: lowering/kernels/tuned.py.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ..lowering.kernels import tuned
from ..lowering.kernels.base import Decomposition
from ..lowering.kernels.tuned import FORMAT, Workgroup

__all__ = ["FORMAT", "TuningCache"]


class TuningCache(tuned.TuningCache):
    """The cache as `gpuengine tune` fills it: what the runtime reads, plus recording and saving choices."""

    def record(self, device_key: str, adapter: str, key: str, choice: Decomposition | Workgroup,
               default_ns: float, tuned_ns: float) -> None:
        device = self.data["devices"].setdefault(device_key, {"adapter": adapter, "kernels": {}})
        entry: dict[str, Any] = ({"decomposition": choice.to_json()} if isinstance(choice, Decomposition)
                                 else {"workgroup": list(choice)})
        device["kernels"][key] = {**entry, "default_ns": float(default_ns), "tuned_ns": float(tuned_ns)}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tuning-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
