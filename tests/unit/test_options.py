"""Engine options are parsed in one place (gpuengine/options.py) with the environment's defaults read in one
place (gpuengine/settings.py); no GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine import settings
from gpuengine.model.ir import Graph, Tensor
from gpuengine.options import EngineOptions, engine_options, f32_tensor_names


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in settings.NAMES:
        monkeypatch.delenv(name, raising=False)
    assert engine_options() == EngineOptions(target="auto")  # the class detected from the adapter
    monkeypatch.setenv(settings.PRECISION, " FP16 ")
    monkeypatch.setenv(settings.OPTIMIZE, "off")
    monkeypatch.setenv(settings.HYBRID, "float")
    options = engine_options()
    assert (options.precision, options.optimize, options.hybrid_arithmetic) == ("fp16", False, "float")
    assert engine_options(precision="fp32", optimize=True).precision == "fp32"  # an argument wins
    assert engine_options().webgpu == "wgpu"  # wgpu-native stays the default
    monkeypatch.setenv(settings.WEBGPU, " Dawn")
    assert (engine_options().webgpu, engine_options(webgpu="wgpu").webgpu) == ("dawn", "wgpu")


@pytest.mark.parametrize("bad", [{"precision": "fp8"}, {"hybrid_arithmetic": "fixed"}, {"memory_strategy": "x"},
                                 {"max_inflight": 0}, {"max_inflight": True}, {"device": object()},
                                 {"target": "no-such-class"}, {"sparse_blocks": 1.5}, {"sparse_blocks": -0.1},
                                 {"sparse_blocks": True}, {"sparse_blocks": "0.3"}, {"webgpu": "vulkan"}])
def test_bad_options_raise_before_any_work(bad: dict) -> None:
    with pytest.raises(ValueError):
        engine_options(**bad)


def test_settings_know_only_user_facing_names() -> None:
    with pytest.raises(KeyError):
        settings.get("GPUENGINE_TEST_MIXED")


def test_f32_tensor_names() -> None:
    graph = Graph(tensors=[Tensor(index=0, name="a", shape=(1,), dtype=np.dtype(np.float32)),
                           Tensor(index=1, name="b", shape=(1,), dtype=np.dtype(np.float32))], ops=[], inputs=[0],
                  outputs=[1])
    assert f32_tensor_names(graph, None) == frozenset()
    assert f32_tensor_names(graph, ["a", 1]) == frozenset({"a", "b"})
    with pytest.raises(ValueError):
        f32_tensor_names(graph, ["c"])
    with pytest.raises(ValueError):
        f32_tensor_names(graph, [2])


def test_only_settings_reads_the_environment() -> None:
    """No library module but gpuengine/settings.py reads a GPUENGINE_* variable (os.environ / os.getenv)."""
    import re

    from helpers import REPO_ROOT

    reads = re.compile(r"os\.(environ|getenv)\b")
    offenders = [f"{path.relative_to(REPO_ROOT)}:{n}" for folder in ("gpuengine", "delegate", "tools")
                 for path in sorted((REPO_ROOT / folder).rglob("*.py")) if path.name != "settings.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if reads.search(line) and "GPUENGINE_" in line]
    assert not offenders, offenders
