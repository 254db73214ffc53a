"""The unit tier: no GPU adapter, no LiteRT. Every test here runs with WebGPU's adapter requests and the
`ai_edge_litert` import made to raise UnitTierViolation (not ImportError, so `pytest.importorskip` and the
library's "LiteRT not installed" paths cannot turn it into a skip): a test that needs either fails loudly, and
belongs in tests/ops, tests/models, tests/api or tests/llm."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

import pytest

BLOCKED_PACKAGE = "ai_edge_litert"
ADAPTER_REQUESTS = ("request_adapter_sync", "request_adapter_async", "enumerate_adapters_sync",
                    "enumerate_adapters_async")


class UnitTierViolation(RuntimeError):
    """A unit test asked for a GPU adapter or imported LiteRT."""


class _RefuseLiteRT(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == BLOCKED_PACKAGE or name.startswith(BLOCKED_PACKAGE + "."):
            raise UnitTierViolation(f"tests/unit imported {name}: a test that needs LiteRT belongs in another tier")
        return None


def _refuse_adapter(*args: Any, **kwargs: Any) -> Any:
    raise UnitTierViolation("tests/unit asked WebGPU for an adapter: a test that needs a GPU belongs in another tier")


@pytest.fixture(autouse=True)
def no_gpu_adapter_no_litert(monkeypatch: pytest.MonkeyPatch) -> None:
    """Applied to every test of this folder only (a conftest fixture), so a session that also collects the
    other tiers keeps its GPU and LiteRT there."""
    import wgpu
    import wgpu._classes
    import wgpu.backends.wgpu_native._api as native

    for cls in {wgpu._classes.GPU, native.GPU, type(wgpu.gpu)}:
        for name in ADAPTER_REQUESTS:
            monkeypatch.setattr(cls, name, _refuse_adapter)
    for name in [m for m in sys.modules if m == BLOCKED_PACKAGE or m.startswith(BLOCKED_PACKAGE + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_RefuseLiteRT(), *sys.meta_path])
