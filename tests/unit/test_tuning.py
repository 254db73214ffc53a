"""Workgroup tuning: the search on a fake timer and the cache format (tests/api/test_tuning_cache.py: the Interpreter
picking the cache up)."""

from __future__ import annotations

import json

import numpy as np

from gpuengine.latency.defaults import default_workgroup
from gpuengine.tuning.cache import FORMAT, TuningCache
from gpuengine.tuning.search import Limits, coarse_grid, neighbours, tune_workgroup, valid


class FakeClock:
    """Advances by a fixed step per measurement, so budgets are exercised without real time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bowl(best: tuple[int, int, int], clock: FakeClock | None = None, noise: float = 0.0):
    rng = np.random.default_rng(0)

    def measure(wg: tuple[int, int, int]) -> float:
        if clock is not None:
            clock.now += 0.01
        cost = sum(abs(np.log2(w) - np.log2(b)) for w, b in zip(wg, best))
        return 1000.0 * (1.0 + cost) * (1.0 + noise * rng.standard_normal())

    return measure


def test_search_finds_the_optimum_of_a_smooth_cost():
    result = tune_workgroup(bowl((32, 2, 1)), (8, 8, 1), (224, 224, 8), Limits(256), budget_s=60)
    assert result.best == (32, 2, 1)
    assert result.speedup > 1.5
    assert result.evaluated[result.default] == result.default_ns


def test_search_survives_noise_with_repeats():
    result = tune_workgroup(bowl((16, 4, 1), noise=0.02), (4, 4, 4), (112, 112, 16), Limits(256), budget_s=60,
                            repeats=5)
    assert result.best == (16, 4, 1)


def test_search_stops_at_the_budget():
    clock = FakeClock()
    result = tune_workgroup(bowl((64, 1, 1), clock), (8, 8, 1), (224, 224, 8), Limits(256), budget_s=0.2,
                            repeats=1, clock=clock)
    # 0.2 s at 0.01 s a measurement: the default plus about 20 candidates, never the whole grid.
    assert 2 <= len(result.evaluated) <= 22


def test_search_keeps_the_default_when_nothing_is_clearly_better():
    result = tune_workgroup(lambda wg: 1000.0 if wg == (8, 8, 1) else 1010.0, (8, 8, 1), (64, 64, 4), Limits(256),
                            budget_s=60)
    assert result.best == (8, 8, 1)


def test_candidates_respect_device_limits_and_grid():
    limits = Limits(max_invocations=64, max_size=(64, 64, 4))
    for wg in coarse_grid((7, 300, 2), limits):
        assert wg[0] * wg[1] * wg[2] <= 64 and wg[2] <= 2 and wg[0] <= 8
    assert all(valid(n, (7, 300, 2), limits) for n in neighbours((8, 8, 1), (7, 300, 2), limits))
    assert not valid((512, 1, 1), (1000, 1, 1), Limits(256))


def test_default_workgroup_fits_small_grids():
    assert default_workgroup((1, 1, 1)) == (1, 1, 1)
    x, y, z = default_workgroup((224, 224, 8))
    assert x * y * z == 64
    assert default_workgroup((3, 1, 100))[0] == 4


def test_cache_round_trip_and_format(tmp_path):
    path = tmp_path / "tune.json"
    cache = TuningCache(path)
    cache.record("dev|Vulkan|drv|1", "Some GPU", "conv2d|K=3|grid=(8, 8, 1)", (16, 4, 1), 2000.0, 1500.0)
    cache.save()
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT
    entry = data["devices"]["dev|Vulkan|drv|1"]
    assert entry["adapter"] == "Some GPU"
    assert entry["kernels"]["conv2d|K=3|grid=(8, 8, 1)"] == {"workgroup": [16, 4, 1], "default_ns": 2000.0,
                                                            "tuned_ns": 1500.0}
    assert TuningCache(path).tuned("dev|Vulkan|drv|1").workgroups == {"conv2d|K=3|grid=(8, 8, 1)": (16, 4, 1)}
    assert TuningCache(path).tuned("other").workgroups == {}


def test_corrupt_cache_is_ignored(tmp_path):
    path = tmp_path / "tune.json"
    path.write_text("{not json")
    assert TuningCache(path).tuned("x").workgroups == {}
    path.write_text(json.dumps({"format": FORMAT, "devices": {"x": {"kernels": {"s": {"workgroup": [0, -1]}}}}}))
    assert TuningCache(path).tuned("x").workgroups == {}


def test_env_var_overrides_cache_location(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUENGINE_TUNE_CACHE", str(tmp_path / "env.json"))
    assert TuningCache().path == tmp_path / "env.json"

