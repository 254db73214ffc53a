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


def pytest_collection_modifyitems(config, items):
    """Under GPUENGINE_PRECISION=fp16 (the op tests' fp16 run), skip the tests of values f16 cannot hold."""
    if os.environ.get("GPUENGINE_PRECISION", "").strip().lower() != "fp16":
        return
    for item in items:
        marker = item.get_closest_marker("fp32_only")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"fp32 only: {marker.args[0] if marker.args else ''}"))
