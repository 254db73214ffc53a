"""Mixed precision (gpuengine/mixed_precision.py): tensors an fp16 program keeps in f32, and the search for them.

Every kernel reading and writing both storage types beside each other is checked by the op tests run with
GPUENGINE_TEST_MIXED=odd / even (scripts/test.sh); here: the option, the storage it buys, and the search on a model
built to need it and on a model that does not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import FP16_TOLERANCE, assert_matches_litert, random_inputs, relative_error, run_gpuengine

from gpuengine import Interpreter, zoo
from gpuengine.mixed_precision import search, stored_tensor_names
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.options import f32_tensor_names
from gpuengine.reference import run_reference

OFFSET = 1000.0  # f16's spacing at 1000 is 0.5: a tensor holding x + 1000 keeps x only to +-0.25


def cancelling_model() -> tuple[bytes, str]:
    """y = conv_b(conv_a(x)): conv_a adds 1000 to x, conv_b mixes the channels and takes the 1000 off again in its
    bias. The stored x + 1000 (convolutions never fuse into each other) loses x in f16, so fp16 is ~0.25 off where
    fp32 is exact; keeping that one tensor in f32 repairs it. Returns the model and that tensor's name."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 4))
    same = {"padding": 1, "stride_w": 1, "stride_h": 1}
    eye = np.eye(4, dtype=np.float32).reshape(4, 1, 1, 4)
    shifted = mb.op("CONV_2D", [x, mb.const("wa", eye), mb.const("ba", np.full(4, OFFSET, np.float32))],
                    (1, 8, 8, 4), same, name="shifted")
    w = eye * 0.5 + 0.125
    bias = -OFFSET * w.sum(axis=(1, 2, 3))
    out = mb.op("CONV_2D", [shifted, mb.const("wb", w), mb.const("bb", bias.astype(np.float32))], (1, 8, 8, 4), same)
    mb.output(out)
    model = mb.build()
    return model, read_model(model).main.tensors[shifted].name


def test_option_takes_names_indices_and_files(tmp_path):
    data = zoo.get("tiny")
    graph = read_model(data).main
    first = graph.ops[0].outputs[0]
    name = graph.tensors[first].name
    assert f32_tensor_names(graph, None) == frozenset()
    assert f32_tensor_names(graph, [first]) == f32_tensor_names(graph, [name]) == {name}
    listed, result = tmp_path / "list.json", tmp_path / "search.json"
    listed.write_text(json.dumps([name]))
    result.write_text(json.dumps({"f32_tensors": [name], "error": 0.0}))
    assert f32_tensor_names(graph, str(listed)) == f32_tensor_names(graph, result) == {name}
    for bad, message in ((["no such tensor"], "no tensor named 'no such tensor'"), ([10 ** 6], "out of range"),
                         ([1.5], "takes tensor names or indices"), (str(tmp_path / "missing.json"), "cannot read")):
        with pytest.raises(ValueError, match=message):
            Interpreter(model_content=data, precision="fp16", f32_tensors=bad)


def test_kept_tensors_are_stored_f32_and_reported():
    """The named tensor, and every tensor its dispatch writes, is stored as f32: the plan grows by what it holds."""
    data = zoo.get("mobilenet_v2")
    feeds = random_inputs(data, 0)
    pure, it16 = run_gpuengine(data, feeds, precision="fp16")
    stored = sorted(stored_tensor_names(read_model(data).main))
    kept = stored[::3]
    mixed, it = run_gpuengine(data, feeds, precision="fp16", f32_tensors=kept)
    programs = it.compiled.gpu_programs
    f32 = {p.graph.tensors[t].name for p in programs for t in p.f32}
    assert set(kept) <= f32 and it.compiled.f32_tensors == len(f32)
    assert f"mixed: {len(f32)} stored tensors kept in f32" in it.describe()
    for p in programs:
        for r in p.info.records:
            elements = r.size // (4 if r.tensor in p.f32 else 2)
            assert elements * (4 if r.tensor in p.f32 else 2) == r.size and elements > 0
    bytes16 = sum(p.info.plan.total_bytes for p in it16.compiled.gpu_programs)
    bytes_mixed = sum(p.info.plan.total_bytes for p in programs)
    _, it32 = run_gpuengine(data, feeds, precision="fp32")
    assert bytes16 < bytes_mixed < sum(p.info.plan.total_bytes for p in it32.compiled.gpu_programs)
    ref = run_reference(data, feeds)
    for t, r in ref.items():
        assert relative_error(mixed[t], r) <= FP16_TOLERANCE
        assert relative_error(mixed[t], r) <= relative_error(pure[t], r) * 1.5 + 1e-6  # not worse than fp16


def test_option_is_ignored_in_fp32():
    data = zoo.get("tiny")
    graph = read_model(data).main
    it = assert_matches_litert(data, precision="fp32", f32_tensors=[graph.ops[0].outputs[0]])
    assert it.compiled.f32_tensors == 0


def test_search_finds_the_cancelling_tensor_and_the_engine_agrees():
    model, shifted = cancelling_model()
    found = search(model, seeds=2)
    assert found.error_all_f16 > 0.1  # x + 1000 in f16 keeps x to +-0.25: the emulation sees it
    assert found.f32_tensors == [shifted] and found.error <= found.target
    feeds = random_inputs(model, 0)
    exact = run_reference(model, feeds)
    out = read_model(model).main.outputs[0]
    pure, _ = run_gpuengine(model, feeds, precision="fp16")
    mixed, it = run_gpuengine(model, feeds, precision="fp16", f32_tensors=found.f32_tensors)
    assert relative_error(pure[out], exact[out]) > 0.05  # the engine in fp16 loses x as the emulation said
    assert relative_error(mixed[out], exact[out]) <= 1e-3 and it.compiled.f32_tensors >= 1


def test_search_keeps_nothing_where_fp16_holds():
    found = search(zoo.get("tiny"), seeds=1)
    assert found.f32_tensors == [] and found.error == found.error_all_f16 <= found.target
    assert found.candidates > 0


def test_reference_rounds_only_the_named_tensors_and_resumes():
    model, shifted = cancelling_model()
    graph = read_model(model).main
    index = next(t.index for t in graph.tensors if t.name == shifted)
    feeds = random_inputs(model, 0)
    exact = run_reference(model, feeds, all_tensors=True)
    out = graph.outputs[0]
    rounded = run_reference(model, feeds, round_to=np.float16, round_only={index})
    assert np.abs(rounded[out] - exact[out]).max() > 0.05
    untouched = run_reference(model, feeds, round_to=np.float16, round_only={out})
    assert np.abs(untouched[out] - exact[out]).max() <= np.abs(exact[out]).max() * 2 ** -11
    # rounding the conv's output, resumed from the exact value of its input: the ADD before it is not evaluated
    conv = graph.ops[1].outputs[0]
    full = run_reference(model, feeds, round_to=np.float16, round_only={conv})
    resumed = run_reference(model, feeds, round_to=np.float16, round_only={conv}, given={index: exact[index]})
    np.testing.assert_array_equal(resumed[out], full[out])
    wrong = run_reference(model, feeds, round_to=np.float16, round_only={conv}, given={index: exact[index] + 1.0})
    assert not np.array_equal(wrong[out], full[out])  # the given value was used, not recomputed


def test_precision_command_searches_saves_and_reuses(tmp_path, capsys):
    """`gpuengine precision --search-f32 --save FILE` adds the fp16-mixed row; `--f32-tensors FILE` reads it back."""
    from gpuengine.tools.cli import main

    model, shifted = cancelling_model()
    path, saved = tmp_path / "cancel.tflite", tmp_path / "f32.json"
    path.write_bytes(model)
    assert main(["precision", str(path), "--seeds", "2", "--search-f32", "--save", str(saved), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["cancel"]
    assert json.loads(saved.read_text())["f32_tensors"] == [shifted]
    assert report["mixed_search"]["f32_tensors"] == 1 and report["mixed_search"]["error_all_f16"] > 0.1
    rows = report["precisions"]
    assert rows["fp16"]["err_vs_float64"] > 0.05 and rows["fp16-mixed"]["err_vs_float64"] < 1e-3
    # (not against fp32's: an fp32 program reads inputs and writes outputs whose PHWC4 layout is their BHWC one in
    # their boundary buffers, outside its arena, where fp16 converts them into it: dispatches.direct_boundaries)
    assert rows["fp16"]["memory_bytes"] < rows["fp16-mixed"]["memory_bytes"]
    assert rows["fp16-mixed"]["f32_tensors"] >= 1
    assert main(["precision", str(path), "--seeds", "1", "--precision", "fp16", "--f32-tensors", str(saved)]) == 0
    assert "| cancel | fp16-mixed |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--save writes a --search-f32 result"):
        main(["precision", str(path), "--save", str(saved)])
