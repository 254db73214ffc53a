"""The latency model (latency/latency.py): held to measurements.

* lavapipe (tests/api/test_latency_measured.py): probe kernels in several decompositions are timed, the model is
  fitted on two thirds of the dispatches and predicts the other third (3-fold cross-validation, every dispatch held
  out once, all in one run): median error <= 25 %, and the order of each dispatch's decompositions, where their
  times differ beyond noise, matches the measured order (Spearman >= 0.8, median over dispatches).
* NVIDIA H100 (tests/fixtures/h100, copied from ../shared/perf/h100, commit 41c54c8): the dispatch floor of a
  chain of dependent dispatches, and the four decompositions of MobileNet v2's 7x7 960 -> 160 1x1 conv. The
  built-in description's cycles per work unit were taken from decomposition A, so B, C and D are the held-out
  check. Those profiles cannot check anything else of today's kernels: their per-dispatch times were taken with
  older kernels (before decompositions and fusion) and with timestamps inside the pass (about 5 us each).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers import FIXTURES, GOAL_ERROR, GOAL_SPEARMAN

from gpuengine import zoo
from gpuengine.latency import devices, latency
from gpuengine.latency.target import named
from gpuengine.lowering.kernels.base import Decomposition
from gpuengine.lowering.kernels.dispatch_cost import dispatch_cost
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions
from gpuengine.planning import planned_dispatches
from gpuengine.tuning import calibrate

H100 = FIXTURES / "h100"


# -- NVIDIA H100 fixtures ---------------------------------------------------------------------------------------


def _late_conv(target: str = "discrete"):
    plan, (specs,) = planned_dispatches(read_model(zoo.get("mobilenet_v2")).main, EngineOptions(), named(target))
    spec = next(s for s in specs if s.shader == "conv2d_1x1" and s.params["SI"] == 240 and s.params["SO"] == 40)
    return spec, dispatch_cost(spec, plan.graph)


def test_h100_conv1x1_decompositions():
    measured = {m.group(1): float(m.group(2)) for m in
                re.finditer(r"^([ABCD]) .*?([\d.]+) us per dispatch", (H100 / "conv1x1_decompositions.txt")
                            .read_text(), re.M)}
    assert sorted(measured) == ["A", "B", "C", "D"]
    # The script's four kernels, as today's conv2d_1x1 decompositions (same tiles, splits, workgroups: the
    # script's grids were 5, 31, 490 and 980 workgroups).
    script = {"A": Decomposition((4, 2), 1, 64), "B": Decomposition((1, 1), 1, 64),
              "C": Decomposition((1, 1), 16, 4, False), "D": Decomposition((1, 1), 16, 2, True)}
    spec, base = _late_conv()
    h100 = devices.built_in("h100")
    costs = {k: latency.candidate_cost(spec.variants, d, base) for k, d in script.items()}
    assert [costs[k].workgroups for k in "ABCD"] == [5, 31, 490, 980]
    predicted = {k: latency.predict_ns(c, h100) / 1e3 for k, c in costs.items()}
    errors = [abs(predicted[k] - measured[k]) / measured[k] for k in "BCD"]  # A set the cycles per unit
    assert np.median(errors) <= GOAL_ERROR, (predicted, measured)
    assert calibrate.spearman([predicted[k] for k in "ABCD"], [measured[k] for k in "ABCD"]) >= GOAL_SPEARMAN
    # and the policy, predicting with the same description, splits it
    assert spec.decomposition.split >= 16


def test_h100_dispatch_floor():
    """A trivial dispatch depending on the previous one costs the chain's barrier: 2.2-2.3 us per dispatch in
    chains of 60-300 dispatches (the n=1 and n=10 figures include the pass's own timestamps)."""
    text = (H100 / "dispatch_floor.txt").read_text()
    per = [float(m.group(2)) for m in re.finditer(r"^dependent\s+n=\s*(\d+):.*\(\s*([\d.]+) us/dispatch\)", text, re.M)
           if int(m.group(1)) >= 60]
    assert len(per) == 3
    trivial = latency.DispatchCost(invocations=64, active=64, workgroups=1, work=50.0, bytes_read=256,
                                   bytes_written=256, macs=64)
    h100 = devices.built_in("h100")
    predicted = latency.predict_ns(trivial, h100) / 1e3
    assert abs(predicted - np.median(per)) / np.median(per) <= 0.1
    # the model's floor of a 57-dispatch chain is at least its barriers (the README's ~0.13 ms)
    assert 57 * latency.floor_ns(trivial, h100) >= 57 * h100.dispatch_ns


# -- the model without a GPU ---------------------------------------------------------------------------------------


def test_prediction_is_above_the_floor_and_splits_win_only_below_the_lanes():
    spec, base = _late_conv()
    for name in devices.names():
        device = devices.built_in(name)
        for d in spec.variants.candidates:
            cost = latency.candidate_cost(spec.variants, d, base)
            assert latency.predict_ns(cost, device) >= latency.floor_ns(cost, device) * 0.999
    # many idle lanes (H100): the split is predicted faster; lavapipe's 2 x 8 lanes are full either way
    unsplit, split = Decomposition((4, 2), 1, 64), Decomposition((1, 1), 16, 2, True)

    def faster(device: latency.Device) -> bool:
        return (latency.predict_ns(latency.candidate_cost(spec.variants, split, base), device)
                < latency.predict_ns(latency.candidate_cost(spec.variants, unsplit, base), device))

    assert faster(devices.built_in("h100")) and not faster(devices.lavapipe(cores=2))


def test_predict_command_every_built_in_device(capsys):
    from gpuengine.tools.cli import main

    assert main(["predict", "tiny", "--device", "all", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["device"] for r in results] == devices.names()
    for r in results:
        assert r["predicted_ms"] >= r["floor_ms"] > 0 and r["ratio"] >= 1
        assert r["dispatches"] and all(d["predicted_ms"] >= d["floor_ms"] > 0 for d in r["dispatches"])
        assert sum(d["predicted_ms"] for d in r["dispatches"]) == pytest.approx(r["predicted_ms"])
    with pytest.raises(SystemExit, match="no built-in device"):
        main(["predict", "tiny", "--device", "nonesuch"])


def test_fit_file_round_trip(tmp_path):
    fitted = latency.with_parameters(devices.lavapipe(cores=2), {"unit_ns": 3.0}, "fitted on test",
                                     {"conv2d_1x1": 1.5})
    path = tmp_path / "latency.json"
    devices.save_fit(path, "adapter-a", fitted, {"samples": 1})
    devices.save_fit(path, "adapter-b", devices.built_in("h100"), {"samples": 2})
    assert devices.load_fit(path, "adapter-a") == fitted
    with pytest.raises(ValueError, match="adapter-a, adapter-b"):
        devices.load_fit(path)
    path.write_text("{not json")
    assert devices.load_fits(path) == {}


def test_candidates_are_priced_with_their_own_templates_efficiency():
    """Flash-decoding's candidates run two templates (attention_lanes where subgroups split a row, else
    attention_partials): each candidate's cost names its own (Variants.template), so a device's fitted efficiency
    of that template prices it, in the policy's ranking too (no base dispatch)."""
    import dataclasses

    from gpuengine.zoo.decoder import DecoderConfig, decoder

    data = decoder(DecoderConfig(layers=1, width=64, heads=4, kv_heads=1, head_dim=64, mlp=128, vocab=256, cache=256,
                                 prefill=8))
    model = read_model(data)
    graph = model.subgraphs[next(s.subgraph for s in model.signatures if s.key == "decode")]
    _, partitions = planned_dispatches(graph, EngineOptions(), named("discrete"), model)
    (spec,) = [s for specs in partitions for s in specs if s.shader in ("attention_lanes", "attention_partials")]
    variants = spec.variants
    lanes = next(d for d in variants.candidates if d.subgroup)
    partials = next(d for d in variants.candidates if not d.subgroup)
    assert latency.candidate_cost(variants, lanes).kernel == "attention_lanes" == variants.make(lanes).shader
    assert latency.candidate_cost(variants, partials).kernel == "attention_partials" == variants.make(partials).shader
    plain = dataclasses.replace(devices.lavapipe(), efficiency={})
    halved = dataclasses.replace(plain, efficiency={"attention_lanes": 0.5})
    cost = latency.candidate_cost(variants, lanes)
    assert latency.compute_ns(cost, halved) < latency.compute_ns(cost, plain)
    cost = latency.candidate_cost(variants, partials)
    assert latency.compute_ns(cost, halved) == latency.compute_ns(cost, plain)
