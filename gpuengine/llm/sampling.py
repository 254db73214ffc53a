"""Sampler settings and the host-side sampler: the same arithmetic as the GPU sampler (shaders/sampler.wgsl), in
float32 numpy, so the host loop and the GPU loop choose the same tokens for the same seed.

Order of candidates: larger logit first, then the lower token id. top_k keeps that many (at most MAX_TOP_K, as
LiteRT-LM's top-k/top-p sampler: top-p works within the top-k); temperature <= 0 or top_k == 1 is greedy.
The draw of step s is u = (pcg(seed ^ pcg(s)) >> 8) / 2^24, PCG's hash (Jarzynski & Olano 2020).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..lowering.kernels.sampler import MAX_TOP_K


@dataclass(frozen=True)
class SamplerConfig:
    """LiteRT-LM's sampler settings: top_k (1 = greedy), top_p, temperature, seed."""

    top_k: int = 1
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        """Each field type-checked (TypeError naming it: a string is not a number), numbers stored as numbers."""
        for name in ("top_k", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"SamplerConfig.{name} must be an integer, got {value!r} ({type(value).__name__})")
            object.__setattr__(self, name, int(value))
        for name in ("top_p", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise TypeError(f"SamplerConfig.{name} must be a number, got {value!r} ({type(value).__name__})")
            object.__setattr__(self, name, float(value))
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"SamplerConfig.top_k must be in [1, {MAX_TOP_K}], got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:  # NaN fails too
            raise ValueError(f"SamplerConfig.top_p must be in (0, 1], got {self.top_p!r}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"SamplerConfig.temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.seed < 0:
            raise ValueError(f"SamplerConfig.seed must be a non-negative integer, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.top_k == 1 or self.temperature <= 0


def pcg(v: np.uint32 | int) -> np.uint32:
    """PCG hash of a 32-bit word (wrapping uint32 arithmetic, as WGSL's u32)."""
    with np.errstate(over="ignore"):
        s = np.uint32(v) * np.uint32(747796405) + np.uint32(2891336453)
        word = ((s >> ((s >> np.uint32(28)) + np.uint32(4))) ^ s) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def uniform(seed: int, step: int) -> np.float32:
    """The draw of step `step`, in [0, 1)."""
    return np.float32(int(pcg(np.uint32(seed & 0xFFFFFFFF) ^ pcg(step)) >> 8)) * np.float32(1.0 / 16777216.0)


def sample(logits: np.ndarray, config: SamplerConfig, step: int) -> int:
    """The token the GPU sampler picks from these logits at this step."""
    x = np.asarray(logits, np.float32).reshape(-1)
    ids = np.arange(x.size)
    finite = ~np.isnan(x)
    order = np.lexsort((ids[finite], -x[finite]))  # larger logit first, then the lower id
    top = ids[finite][order][:config.top_k]
    if top.size == 0:
        return 0
    if config.greedy or top.size == 1:
        return int(top[0])
    t = np.float32(config.temperature)
    weights = np.exp((x[top] - x[top[0]]) / t).astype(np.float32)
    total = np.float32(0)
    for w in weights:
        total = np.float32(total + w)
    mass, kept = np.float32(0), 0
    for k, w in enumerate(weights):
        mass = np.float32(mass + w)
        kept = k + 1
        if mass >= np.float32(config.top_p) * total:
            break
    goal = uniform(config.seed, step) * mass
    running = np.float32(0)
    for k in range(kept):
        running = np.float32(running + weights[k])
        if running > goal:
            return int(top[k])
    return int(top[kept - 1])
