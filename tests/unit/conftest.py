"""The unit tier: no GPU adapter, no LiteRT. While a test module here is imported and while each of its tests
runs, WebGPU's adapter, device and GPU-object requests and the `ai_edge_litert` import raise UnitTierViolation
(not ImportError, so `pytest.importorskip` and the library's "LiteRT not installed" paths cannot turn it into a
skip): a test that needs either fails loudly, and belongs in tests/ops, tests/models, tests/api or tests/llm.
Only this folder is guarded (conftest hooks and fixtures apply below their folder), so a session that collects
the other tiers too keeps its GPU and LiteRT there."""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Iterator
from typing import Any

import pytest

BLOCKED_PACKAGE = "ai_edge_litert"
GPU_REQUESTS = {  # class -> methods; the device's methods too, so a device cached by an earlier tier is refused
    "GPU": ("request_adapter_sync", "request_adapter_async", "enumerate_adapters_sync", "enumerate_adapters_async"),
    "GPUAdapter": ("request_device_sync", "request_device_async"),
    "GPUDevice": ("create_buffer", "create_buffer_with_data", "create_shader_module", "create_compute_pipeline",
                  "create_command_encoder"),
}


class UnitTierViolation(RuntimeError):
    """A unit test asked for a GPU adapter or device, or imported LiteRT."""


class _RefuseLiteRT(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == BLOCKED_PACKAGE or name.startswith(BLOCKED_PACKAGE + "."):
            raise UnitTierViolation(f"tests/unit imported {name}: a test that needs LiteRT belongs in another tier")
        return None


def _refuse_gpu(*args: Any, **kwargs: Any) -> Any:
    raise UnitTierViolation("tests/unit asked WebGPU for an adapter, a device or GPU work: a test that needs a "
                            "GPU belongs in another tier")


@contextlib.contextmanager
def no_gpu_no_litert() -> Iterator[None]:
    """Refuse LiteRT imports (hiding an already imported ai_edge_litert) and WebGPU requests, then restore."""
    import wgpu
    import wgpu._classes as base
    import wgpu.backends.wgpu_native._api as native

    with pytest.MonkeyPatch.context() as patch:
        for class_name, methods in GPU_REQUESTS.items():
            for cls in {getattr(base, class_name), getattr(native, class_name)}:
                for method in methods:
                    if hasattr(cls, method):
                        patch.setattr(cls, method, _refuse_gpu)
        for method in GPU_REQUESTS["GPU"]:
            patch.setattr(type(wgpu.gpu), method, _refuse_gpu)
        for name in [m for m in sys.modules if m == BLOCKED_PACKAGE or m.startswith(BLOCKED_PACKAGE + ".")]:
            patch.delitem(sys.modules, name)
        patch.setattr(sys, "meta_path", [_RefuseLiteRT(), *sys.meta_path])
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """Importing a test module (module-level importorskip, models built at import) is guarded too."""
    with no_gpu_no_litert():
        yield


@pytest.fixture(autouse=True)
def unit_tier_guard() -> Iterator[None]:
    with no_gpu_no_litert():
        yield
