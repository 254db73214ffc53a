"""Shared fixtures: a bounded, seeded hypothesis profile (lavapipe is slow) and the oracle helpers."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "gpuengine", max_examples=int(os.environ.get("GPUENGINE_EXAMPLES", "10")), deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=True,
)
settings.load_profile("gpuengine")


@pytest.fixture(scope="session")
def gpu():
    from gpuengine.runtime.device import get_device

    return get_device()
