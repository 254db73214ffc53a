"""The latency model against measurements on this machine's adapter: a fit on lavapipe predicts held-out dispatches,
and `gpuengine calibrate` saves a fit that `predict` and the policy use (tests/unit/test_latency.py: the model
alone, on the H100 fixtures)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import GOAL_ERROR, GOAL_SPEARMAN

from gpuengine import zoo
from gpuengine.latency import devices
from gpuengine.tuning import calibrate

# -- lavapipe: fitted and held out ---------------------------------------------------------------------------------


def _probe_samples() -> list[calibrate.Sample]:
    from gpuengine import Interpreter

    samples = []
    probes = [("probe1", calibrate.probe_model(1)), ("probe2", calibrate.probe_model(2)),
              ("gathers", calibrate.gather_probe_model())]
    for name, model in probes:
        it = Interpreter(model_content=model, workgroup_cache="/nonexistent/none.json", target="cpu")
        it.allocate_tensors()
        samples += calibrate.measure_program(it, name, runs=8, alternatives=3, target_pass_ns=2e6)
    return samples


@pytest.mark.timing
def test_fit_predicts_held_out_dispatches_on_lavapipe():
    """Gathers included (the model counts the rows they read). Lavapipe's "GPU" is this machine's CPU, shared with
    whatever else runs: each sample is already the fastest of 8 rounds of 2 ms passes. When the goal is missed, the
    probes are measured again and each sample keeps the faster of the two (16 rounds over a longer time: more
    chances of a quiet moment); the goal never moves."""
    samples = _probe_samples()
    assert len({s.group for s in samples}) >= 15 and len(samples) >= 40
    # the gathers are among the held-out dispatches: one token's rows of a 4.7 MB (int8) and an 8.4 MB (f32) table
    gathers = [s for s in samples if s.cost.label.startswith(("EMBEDDING_LOOKUP", "GATHER"))]
    assert len(gathers) == 3 and all(s.cost.bytes < 8192 for s in gathers)
    errors, order = calibrate.cross_validate(samples, devices.lavapipe())
    if np.median(errors) > GOAL_ERROR or np.median(list(order.values())) < GOAL_SPEARMAN:
        again = _probe_samples()
        assert [(s.group, s.cost) for s in again] == [(s.group, s.cost) for s in samples]
        samples = [calibrate.Sample(s.cost, min(s.measured_ns, t.measured_ns), s.group, s.default)
                   for s, t in zip(samples, again)]
        errors, order = calibrate.cross_validate(samples, devices.lavapipe())
    assert len(errors) == len(samples) and len(order) >= 4
    assert np.median(errors) <= GOAL_ERROR, f"held-out median error {np.median(errors):.1%}"
    assert np.median(list(order.values())) >= GOAL_SPEARMAN, order
    # The gathers by a fit that never saw one, so that no fitted bandwidth can absorb their bytes: within 2x of the
    # measured (charged the whole table, the model predicted 5-46x their time here; load only slows the measured).
    gathers = [s for s in samples if s.cost.label.startswith(("EMBEDDING_LOOKUP", "GATHER"))]
    unseen = calibrate.fit([s for s in samples if s not in gathers], devices.lavapipe())
    gather_errors = calibrate.relative_errors(gathers, unseen)
    assert np.median(gather_errors) <= 1.0, gather_errors


def test_calibrate_saves_a_fit_that_predict_and_the_policy_use(tmp_path, capsys):
    from gpuengine.tools.cli import main

    from gpuengine import Interpreter

    cache = tmp_path / "tuning.json"
    assert main(["calibrate", "--scale", "1", "--alternatives", "1", "--runs", "2", "--cache", str(cache),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["saved"] == str(tmp_path / "latency.json") and report["fit"]["samples"] >= 9
    assert report["holdout"]["held_out"] >= 3 and report["fit"]["median_error"] is not None
    assert main(["predict", "tiny", "--fit", report["saved"], "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["device_source"].startswith("fitted on") and predicted["predicted_ms"] > 0
    it = Interpreter(model_content=zoo.get("tiny"), workgroup_cache=str(cache))
    it.allocate_tensors()
    fitted = it.compiled.gpu_programs[0].choices.tuned.latency
    assert fitted is not None and fitted.source == predicted["device_source"]
