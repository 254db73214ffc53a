"""Fixtures of the API tier."""

from __future__ import annotations

import pytest
from wgpu.backends.wgpu_native import GPUBuffer as NativeBuffer


@pytest.fixture
def count_maps(monkeypatch):
    counter = {"maps": 0}
    original = NativeBuffer.map_async

    def counting(self, *args, **kwargs):
        counter["maps"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NativeBuffer, "map_async", counting)
    return counter
