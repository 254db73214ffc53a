"""The `gpuengine` command on user mistakes: one line on stderr, no traceback, and the exit status every command
shares (0 ok, 1 a failed comparison or run, 2 bad usage or a bad model file).

main() returns the status, or raises SystemExit with it for a usage mistake (as argparse does); the subprocess
cases check what a shell sees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpuengine.tools import fetch
from gpuengine.tools.cli import main
from helpers import SHARED_MODELS

from gpuengine import zoo

ADAPTER_NOTICE = "gpuengine: no hardware GPU adapter found"
MODEL_COMMANDS = ["run", "inspect", "memplan", "bench", "profile", "tune", "precision", "predict", "fuzz"]


def outcome(capsys, argv: list[str], notice: str = ADAPTER_NOTICE) -> tuple[int, str]:
    """(exit status, the one line on stderr) of `gpuengine ARGV`; asserts there is exactly one such line besides
    the software adapter's notice (or `notice`)."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code
    lines = [ln for ln in capsys.readouterr().err.splitlines()
             if ln and not ln.startswith(ADAPTER_NOTICE) and not ln.startswith(notice)]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return status, lines[0]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad")
    data = zoo.get("tiny")
    files = {"garbage": b"not a model at all\n", "truncated": data[:len(data) // 2], "empty": b""}
    for name, content in files.items():
        (folder / f"{name}.tflite").write_bytes(content)
    return {name: folder / f"{name}.tflite" for name in files}


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_malformed_file_exits_2_in_every_command(capsys, bad_files, command):
    status, line = outcome(capsys, [command, str(bad_files["garbage"])])
    assert (status, line) == (2, "gpuengine: not a .tflite model: missing the 'TFL3' file identifier")


def test_a_truncated_file_says_how_much_is_missing(capsys, bad_files):
    size = bad_files["truncated"].stat().st_size
    for command in ("run", "inspect"):
        status, line = outcome(capsys, [command, str(bad_files["truncated"])])
        assert status == 2
        assert line.startswith(f"gpuengine: truncated: the file has {size} bytes, its tables need "), line
        assert int(line.rsplit(" ", 1)[1]) > size
    assert outcome(capsys, ["run", str(bad_files["empty"])]) == (2, "gpuengine: not a .tflite model: only 0 bytes")


@pytest.mark.parametrize("spec", ["nowhere/model.tflite", "model.tflite", "./tiny"])
def test_a_missing_path_says_no_such_file(capsys, spec):
    assert outcome(capsys, ["run", spec]) == (2, f"gpuengine: no such file: {spec}")
    assert outcome(capsys, ["inspect", spec]) == (2, f"gpuengine: no such file: {spec}")


def test_a_folder_is_no_model(capsys, tmp_path):
    assert outcome(capsys, ["run", str(tmp_path)]) == (2, f"gpuengine: {tmp_path} is a folder, not a model file")


def test_an_unknown_name_lists_the_names(capsys, monkeypatch):
    monkeypatch.setattr(fetch, "cached_models", lambda: {"selfie_segmentation": Path("x.tflite")})
    monkeypatch.setattr(fetch, "fetch", lambda *a, **k: {"selfie_segmentation": Path("x.tflite")})
    status, line = outcome(capsys, ["run", "no_such_model"])
    assert status == 2
    assert line.startswith("gpuengine: no model file, zoo model or reference model named 'no_such_model'; ")
    assert "tiny" in line and "reference models: selfie_segmentation" in line


def test_reference_models_unavailable_is_a_failed_run(capsys, monkeypatch):
    def offline(*args, **kwargs):
        raise fetch.ModelsUnavailable("pip could not download mediapipe (offline?)")

    monkeypatch.setattr(fetch, "cached_models", lambda: {})
    monkeypatch.setattr(fetch, "fetch", offline)
    fetching = "gpuengine: 'selfie_segmentation' is no model file or zoo model; fetching the reference models"
    status, line = outcome(capsys, ["run", "selfie_segmentation"], notice=fetching)
    assert status == 1 and line.endswith("the reference models are unavailable: pip could not download mediapipe "
                                         "(offline?)"), line


@pytest.fixture(scope="module")
def input_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    arrays = {"wrong_shape": np.ones((3, 3), np.float32), "text": np.array(["a"] * 3072).reshape(1, 32, 32, 3)}
    files = {name: folder / f"{name}.npy" for name in arrays}
    for name, value in arrays.items():
        np.save(files[name], value)
    files["not_npy"] = folder / "not_npy.npy"
    files["not_npy"].write_text("hello\n")
    files["missing"] = folder / "missing.npy"
    return files


def tiny_input() -> tuple[str, tuple[int, ...]]:
    from gpuengine.model.reader import read_model

    graph = read_model(zoo.get("tiny")).main
    tensor = graph.tensors[graph.inputs[0]]
    return tensor.name, tuple(tensor.shape)


def test_input_file_mistakes(capsys, input_files):
    name, shape = tiny_input()
    assert shape == (1, 32, 32, 3)  # the text array above has its shape, so only its dtype is wrong
    cases = {
        f"{name}={input_files['missing']}": f"gpuengine: --input {name}: no such file: {input_files['missing']}",
        f"{name}={input_files['not_npy']}": f"gpuengine: --input {name}: {input_files['not_npy']} is not a .npy "
                                            "file",
        f"{name}={input_files['wrong_shape']}": f"gpuengine: --input {name}: the file holds shape (3, 3), the "
                                                f"model's input takes {shape}",
        f"{name}={input_files['text']}": f"gpuengine: --input {name}: the file holds <U1, the model's input takes "
                                         "float32",
        f"nope={input_files['wrong_shape']}": f"gpuengine: unknown input(s) ['nope']; the model's inputs are "
                                              f"['{name}']",
        name: f"gpuengine: --input takes NAME=FILE.npy, got '{name}'",
    }
    for item, message in cases.items():
        assert outcome(capsys, ["run", "tiny", "--runs", "1", "--input", item]) == (2, message)


def test_bad_option_values_exit_2(capsys):
    status, line = outcome(capsys, ["run", "tiny", "--precision", "fp8"])
    assert status == 2 and line.startswith("gpuengine: ") and "fp8" in line
    status, line = outcome(capsys, ["inspect", "tiny", "--target", "tpu"])
    assert status == 2 and "target 'tpu' is not one of" in line
    status, line = outcome(capsys, ["run", "tiny", "--signature", "decode"])
    assert (status, line) == (2, "gpuengine: --signature 'decode': the model's signatures are none")


@pytest.mark.skipif(not (SHARED_MODELS / "toy_decoder_kv.tflite").exists(), reason="the shared models are absent")
def test_signature_mistakes(capsys, tmp_path):
    model = str(SHARED_MODELS / "toy_decoder_kv.tflite")
    status, line = outcome(capsys, ["run", model, "--signature", "prefil"])
    assert (status, line) == (2, "gpuengine: --signature 'prefil': the model's signatures are ['prefill', 'decode']")
    floats, ids = tmp_path / "floats.npy", tmp_path / "ids.npy"
    np.save(floats, np.ones((1, 1), np.float32))
    np.save(ids, np.ones((1, 1), np.int64))
    assert outcome(capsys, ["run", model, "--runs", "1", "--input", f"tokens={ids}"]) == (
        2, "gpuengine: --input: the model has several signatures (prefill, decode); name the one the inputs are for "
           "with --signature KEY")
    assert outcome(capsys, ["run", model, "--runs", "1", "--signature", "decode", "--input", f"tokens={floats}"]) == (
        2, "gpuengine: --input tokens: the file holds float32, signature 'decode' takes int32")
    assert outcome(capsys, ["run", model, "--runs", "1", "--signature", "prefill", "--input", f"tokens={ids}"]) == (
        2, "gpuengine: --input tokens: the file holds shape (1, 1), signature 'prefill' takes (1, 100)")
    status, line = outcome(capsys, ["run", model, "--runs", "1", "--signature", "decode", "--input", f"nope={ids}"])
    assert status == 2 and line.startswith("gpuengine: unknown input(s) ['nope']; signature 'decode' takes [")
    assert main(["run", model, "--runs", "1", "--signature", "decode", "--input", f"tokens={ids}"]) == 0


def shell(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuengine.tools.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_shell_sees_one_line_and_the_status(bad_files):
    """What a user sees: the status, one line on stderr, nothing on stdout, no traceback."""
    for args, status, start in [(["run", str(bad_files["truncated"])], 2, "gpuengine: truncated: the file has "),
                                (["inspect", "no/such.tflite"], 2, "gpuengine: no such file: no/such.tflite"),
                                (["run", "tiny", "--input", "x"], 2, "gpuengine: --input takes NAME=FILE.npy")]:
        proc = shell(*args)
        lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith(ADAPTER_NOTICE)]
        assert (proc.returncode, len(lines), proc.stdout) == (status, 1, ""), proc.stderr
        assert lines[0].startswith(start) and "Traceback" not in proc.stderr


def test_help_line_for_every_option():
    import argparse

    from gpuengine.tools.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"{name} {a.option_strings or a.dest}" for name, parser in sub.choices.items()
               for a in parser._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert missing == []


def test_argument_mistakes_take_one_line(capsys, tmp_path):
    assert outcome(capsys, ["run", "tiny", "--runs", "-3"]) == (
        2, "gpuengine run: argument --runs: invalid integer >= 1 value: '-3' (see gpuengine run --help)")
    assert outcome(capsys, ["inspect"]) == (
        2, "gpuengine inspect: the following arguments are required: model (see gpuengine inspect --help)")
    status, line = outcome(capsys, ["bogus"])
    assert status == 2 and line.startswith("gpuengine: argument command: invalid choice: 'bogus'")
    assert outcome(capsys, ["memplan", "tiny", "--strategies", "greedy,bogus"]) == (
        2, "gpuengine: --strategies: unknown bogus; known: naive, greedy, greedy_in_order, greedy_by_breadth, "
           "greedy_by_size_dist_priority, greedy_best, mincostflow, greedy_by_size, offsets, best")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert outcome(capsys, ["run", "tiny", "--runs", "1", "--output-dir", str(a_file)]) == (
        2, f"gpuengine: --output-dir {a_file}: File exists")
