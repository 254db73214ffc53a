"""Adapter classes: how much parallel work a device wants, which decides how kernels divide their work.

The TFLite GPU delegate chooses block sizes per GPU family; gpuengine chooses per adapter class, from the
adapter's own report, and lets the user say otherwise (`Interpreter(target=...)`, env GPUENGINE_TARGET,
`--target` on the command line): every decomposition is correct on every adapter, only its speed differs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .. import settings

TARGETS = ("discrete", "integrated", "cpu")
# Invocations one dispatch should launch to keep a device of the class busy. A discrete GPU such as an H100
# has 132 multiprocessors of 4 x 32 lanes that need several invocations each to hide memory latency; an
# integrated GPU has tens of execution units; a CPU adapter (lavapipe) runs 8-wide SIMD on a few cores, where
# more invocations only add overhead.
FILL = {"discrete": 32768, "integrated": 4096, "cpu": 64}


@dataclass(frozen=True)
class Target:
    name: str  # one of TARGETS
    fill: int  # invocations a dispatch should launch (latency/policy.py)
    subgroups: bool  # the device has the `subgroup` feature: splits may reduce with subgroup shuffles
    detected: bool  # True when taken from the adapter, False when the user chose it

    def describe(self) -> str:
        how = "detected" if self.detected else "chosen"
        return f"{self.name} ({how}; subgroup reductions {'on' if self.subgroups else 'off'})"


def classify(info: Mapping[str, Any]) -> str:
    """The class of an adapter from its info (WebGPU's adapter type; unknown types count as integrated)."""
    kind = str(info.get("adapter_type", ""))
    if kind == "DiscreteGPU":
        return "discrete"
    if kind == "CPU":
        return "cpu"
    return "integrated"


def check(preference: str | None) -> str:
    """The normalized preference ('auto' or a class); ValueError for anything else."""
    value = (preference or settings.get(settings.TARGET) or "auto").strip().lower()
    if value != "auto" and value not in TARGETS:
        source = "target" if preference else "GPUENGINE_TARGET"
        raise ValueError(f"{source} {value!r} is not one of auto, {', '.join(TARGETS)}")
    return value


def named(name: str, subgroups: bool = True) -> Target:
    """The target of a class, as if chosen by the user (for planning without a device)."""
    return Target(name, FILL[name], subgroups, False)


def resolve(preference: str | None, info: Mapping[str, Any], features: Collection[str]) -> Target:
    """The target for a device: the user's choice (argument, else env GPUENGINE_TARGET) or the adapter's class."""
    value = check(preference)
    name = classify(info) if value == "auto" else value
    return Target(name, FILL[name], "subgroup" in features, value == "auto")
