"""The target's policy over work decompositions without a GPU: adapter classes and the override, the predicted latency
deciding below the lanes and total work above, MobileNet v2's late 1x1 conv, candidates within WebGPU's default limits,
and the search finding the cheapest (tests/models/test_decompositions.py: every decomposition run on the GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.latency import policy
from gpuengine.latency.target import FILL, Target, classify, named, resolve
from gpuengine.lowering.kernels.base import Decomposition, Variants
from gpuengine.lowering.kernels.tiling import decompositions, default_group, lane_memory_fits
from gpuengine.tuning.search import decomposition_space, search


def test_adapter_classes_and_override(monkeypatch):
    assert classify({"adapter_type": "DiscreteGPU"}) == "discrete"
    assert classify({"adapter_type": "IntegratedGPU"}) == "integrated"
    assert classify({"adapter_type": "CPU"}) == "cpu"
    assert classify({"adapter_type": "Unknown"}) == "integrated"
    info = {"adapter_type": "CPU"}
    assert resolve(None, info, ()) == Target("cpu", FILL["cpu"], False, True)
    assert resolve("discrete", info, ("subgroup",)) == Target("discrete", FILL["discrete"], True, False)
    monkeypatch.setenv("GPUENGINE_TARGET", "integrated")
    assert resolve(None, info, ()).name == "integrated"
    assert resolve("auto", info, ()).name == "cpu"
    with pytest.raises(ValueError, match="GPUENGINE_TARGET 'tpu'"):
        monkeypatch.setenv("GPUENGINE_TARGET", "tpu")
        resolve(None, info, ())


def _synthetic(costs: dict[Decomposition, tuple[int, float]]) -> Variants:
    """Variants whose candidates have the given (active invocations, work per invocation)."""
    return Variants("p", list(costs), lambda d: costs[d][0], lambda d: costs[d][0], lambda d: costs[d][1],
                    lambda d: None, 0)  # type: ignore[arg-type, return-value]


def test_policy_predicts_latency_below_the_lanes_and_total_work_above():
    """The policy ranks by the latency model (latency/latency.py) on the target's built-in description: an H100
    (132 x 128 lanes), an Iris Xe (96 x 8) or lavapipe (cores x 4)."""
    big, mid = Decomposition((4, 2), 1), Decomposition((2, 1), 1)
    split, split_sg = Decomposition((1, 1), 16, 4, False), Decomposition((1, 1), 16, 4, True)
    v = _synthetic({big: (500, 20_000.0), mid: (4_000, 3_000.0), split: (32_000, 600.0),
                    split_sg: (32_000, 600.0)})
    # discrete: all three fit in one or two rounds of 16,896 lanes: one invocation's latency decides -> the split
    assert policy.choose(v, named("discrete", subgroups=True)) == split_sg
    assert policy.choose(v, named("discrete", subgroups=False)) == split
    # integrated (768 lanes): the big tile still fits in one round (20,000 units), the mid one takes 5.2 rounds
    # of 3,000 (15,600), the split 42 rounds of 600
    assert policy.choose(v, named("integrated")) == mid
    # cpu: every candidate takes many rounds: total work, 10M units for the big tile against 12M and 19M
    assert policy.choose(v, named("cpu")) == big
    from gpuengine.latency import devices, latency

    h100 = devices.built_in("h100")
    assert policy.estimated_time(v, split, named("discrete")) == pytest.approx(
        latency.predict_ns(latency.candidate_cost(v, split), h100))
    assert policy.ranked(v, named("discrete"), devices.lavapipe(cores=2))[0] == big  # a description given


def test_policy_on_mobilenet_v2_late_1x1_conv():
    """7x7 pixels, 960 -> 160 channels (the conv that took ~128 us on an H100 unsplit): split on discrete,
    large tiles on cpu."""
    from gpuengine import zoo
    from gpuengine.model.reader import read_model
    from gpuengine.options import EngineOptions
    from gpuengine.planning import planned_dispatches

    def conv(target: str) -> Decomposition:
        plan, (specs,) = planned_dispatches(read_model(zoo.get("mobilenet_v2")).main, EngineOptions(), named(target))
        return next(s.decomposition for s in specs
                    if s.shader == "conv2d_1x1" and s.params["SI"] == 240 and s.params["SO"] == 40)

    assert conv("discrete").split >= 16 and conv("discrete").subgroup
    # lavapipe: the largest tile, with at most a shallow subgroup split (what `tune` measured best there: split 2)
    assert conv("cpu").tile == (4, 2) and conv("cpu").split <= 4


def test_candidates_stay_within_default_limits():
    for d in decompositions([(4, 2), (1, 1)], 240, lambda t: 1000 // (t[0] * t[1])):
        assert d.invocations_per_workgroup <= 256 and lane_memory_fits(d, d.tile[0] * d.tile[1])
        assert d.split == 1 or d.split * 2 <= 240
    assert default_group(16) == 4 and default_group(1, tiles=5) == 8 and default_group(256) == 1


def test_search_over_decompositions_finds_the_cheapest():
    v = _synthetic({Decomposition((2, 2), 1, 64): (100, 1.0), Decomposition((1, 1), 8, 8, True): (800, 1.0),
                    Decomposition((1, 1), 16, 4, True): (1600, 1.0), Decomposition((1, 1), 32, 2, True): (3200, 1.0)})
    best = Decomposition((1, 1), 16, 8, True)  # a doubled workgroup of a listed split: found by descent

    def cost(d: Decomposition) -> float:
        return 1000.0 + 10 * abs(np.log2(d.split / 16)) + 5 * abs(np.log2(d.group / 8)) + (50 if d.split == 1 else 0)

    start = Decomposition((2, 2), 1, 64)
    candidates, around = decomposition_space(v, start, subgroups=True)
    assert all(d.split == 1 or d.subgroup for d in candidates)
    result = search(cost, start, candidates, around, budget_s=60, repeats=1)
    assert result.best == best and result.speedup > 1.04
