"""DyCL's dynamic networks as Keras converts them (tests/fixtures/dycl, made by scripts/dev/make_dycl_models.py):
Shallow-Deep early exit and SkipNet block skipping (tf.cond -> IF) and an encoder-decoder generation loop
(tf.while_loop -> WHILE). Each is checked against LiteRT over inputs that take every branch (the branch TensorFlow
took is recorded with the inputs), with every op of every branch and body in a GPU partition, and the host's
decisions per invoke counted and timed (runtime/control_flow.ControlTiming; no timing goal asserted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import relative_error, tolerance

from gpuengine import Interpreter
from gpuengine.planning import COND_ON_HOST
from gpuengine.runtime.control_flow import IfProgram, WhileProgram

litert = pytest.importorskip("ai_edge_litert.interpreter")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dycl"
TOL = 1e-5


def _load(name: str) -> tuple[Interpreter, Any, Any]:
    data = (FIXTURES / f"{name}.tflite").read_bytes()
    ours, theirs = Interpreter(model_content=data), litert.Interpreter(model_content=data)
    ours.allocate_tensors()
    theirs.allocate_tensors()
    (program,) = ours.compiled.control_programs
    return ours, theirs, program


def _invoke_both(ours: Interpreter, theirs: Any, values: list[np.ndarray]) -> float:
    for it in (ours, theirs):
        for detail, value in zip(it.get_input_details(), values):
            it.set_tensor(detail["index"], value)
        it.invoke()
    out = theirs.get_output_details()[0]["index"]
    return relative_error(ours.get_tensor(out), theirs.get_tensor(out))


def _all_on_gpu(ours: Interpreter) -> None:
    """The main graph's partitions are GPU programs or the host-driven op; every partition of the op's branches and
    loop body (an empty branch has none) is a GPU program: no CPU fallback inside a branch or a loop body. A loop
    whose variables cross the host (TF2's int32 loop counter) has the host evaluate its cond, by design
    (planning.COND_ON_HOST), not for want of a GPU kernel."""
    plan = ours.compiled.plan
    assert {p.device for p in plan.partitions} <= {"gpu", "control"}
    (control,) = plan.control.values()
    for role, sub in control.plans.items():
        devices = [p.device for p in sub.partitions]
        if role == "cond" and control.resident is not None:
            assert devices == ["cpu"] and set(sub.support.values()) == {COND_ON_HOST}
        else:
            assert all(d == "gpu" for d in devices), (role, devices)
    assert any(sub.partitions for sub in control.plans.values())


@pytest.mark.parametrize("name", ["shallow_deep", "skipnet"])
def test_if_models_equal_litert_on_both_branches(name: str) -> None:
    inputs = np.load(FIXTURES / "inputs.npz")
    xs, then_by_tf = inputs[f"{name}_x"], inputs[f"{name}_then"]
    assert 0 < then_by_tf.sum() < len(then_by_tf)  # the fixture's inputs take both branches
    ours, theirs, program = _load(name)
    assert isinstance(program, IfProgram)
    _all_on_gpu(ours)
    taken = []
    for x in xs:
        assert _invoke_both(ours, theirs, [x]) <= tolerance(ours, TOL)
        taken.append(program.taken)
        assert program.timing.decisions == 1 and program.timing.decide_s > 0
    assert taken == ["then" if t else "else" for t in then_by_tf]


def test_generation_loop_equals_litert_for_every_length() -> None:
    inputs = np.load(FIXTURES / "inputs.npz")
    ours, theirs, program = _load("encoder_decoder")
    assert isinstance(program, WhileProgram)
    _all_on_gpu(ours)
    for src in inputs["encoder_decoder_src"][:2]:
        for steps in inputs["encoder_decoder_steps"]:
            assert _invoke_both(ours, theirs, [src, steps]) <= tolerance(ours, TOL)
            assert program.iterations == int(steps[0])
            # one cond evaluation per iteration and the one that ends the loop
            assert program.timing.decisions == program.iterations + 1 and program.timing.decide_s > 0


def test_profile_reports_the_host_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from gpuengine.tools.cli import main

    assert main(["profile", str(FIXTURES / "skipnet.tflite"), "--runs", "3", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["control_flow"]
    assert row["op"] == "IF" and row["decisions"] == 1 and row["decide_ms"] > 0 and row["run_ms"] >= 0
    assert row["last"] in ("then", "else")
