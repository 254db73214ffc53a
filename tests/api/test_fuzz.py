"""The fuzzer (tools/fuzz.py): every case it ever found still ends as a ModelError or a clean run, a fixed-seed
slice of mutants does too, mutations are deterministic and reach the schema's fields, and the harness tells a
crash, a hang and running out of memory apart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuengine.tools import fuzz
from helpers import TESTS_DIR

from gpuengine import zoo

CORPUS = TESTS_DIR / "fuzz_corpus"


def test_every_corpus_case_ends_as_model_error_or_clean_run() -> None:
    """...and a ModelError is raised at construction (the reader or the validator), not later by LiteRT's prepare
    in the CPU fallback, which is where several of these ended before their rule existed."""
    paths = sorted(CORPUS.glob("*.tflite"))
    assert len(paths) >= 20
    results = fuzz.replay(paths, timeout_s=120)
    expect = {str(p): json.loads(p.with_suffix(".json").read_text()).get("expect") for p in paths}
    bad = [f"{Path(r['path']).name}: {r['outcome']} at {r.get('stage')}: {r.get('type', '')} {r.get('message', '')}"
           for r in results if r["outcome"] != expect[r["path"]]  # a well-formed op nothing here can run
           and (r["outcome"] not in fuzz.GOOD or r.get("stage", "load") != "load")]
    assert not bad, "\n".join(bad)
    for path in paths:  # each file says how it was found and what it did then
        meta = json.loads(path.with_suffix(".json").read_text())
        assert meta["outcome"] != "clean" and {"seed", "case", "mutation", "model", "found"} <= set(meta)


def slice_models() -> list[tuple[str, bytes]]:
    """The tiny zoo model three times out of four; face_detection_short_range (a real converter's layout,
    DEQUANTIZE'd fp16 weights) the fourth, when the reference models are cached."""
    from gpuengine.tools import fetch

    tiny = ("tiny", zoo.get("tiny"))
    try:
        path = fetch.model_path("face_detection_short_range", download=False)
        face = ("face_detection_short_range", path.read_bytes())
    except (fetch.ModelsUnavailable, KeyError):
        return [tiny]
    return [tiny, tiny, face, tiny]


def test_fixed_seed_slice() -> None:
    """600 mutants: no crash, hang, OOM or stray exception; clean runs and ModelErrors both occur."""
    campaign = fuzz.fuzz(slice_models(), count=600, seed=20240, timeout_s=120)
    report = campaign.to_json()
    assert campaign.cases == 600
    assert not campaign.findings, json.dumps(campaign.findings, indent=1)[:4000]
    assert not campaign.review, campaign.review  # every ModelError at construction, none from LiteRT's prepare
    assert report["counts"]["clean"] > 60 and report["counts"]["model_error"] > 250, report["counts"]
    assert set(report["by_mutator"]) == set(fuzz.MUTATORS)


def test_mutations_are_deterministic_and_targeted() -> None:
    data = zoo.get("tiny")
    for case in range(40):
        assert fuzz.mutate(data, 7, case) == fuzz.mutate(data, 7, case)
    assert fuzz.mutate(data, 7, 0) != fuzz.mutate(data, 8, 0)
    categories = {s.category for s in fuzz.field_sites(data)}
    assert {"shape", "tensor_type", "buffer_index", "op_code", "op_tensors", "option", "graph_io"} \
        <= categories
    seen = set()
    for case in range(300):
        mutant, info = fuzz.mutate(data, 1, case)
        seen.add(info["mutator"])
        assert mutant != data or info["mutator"] == "ir"
        if info["mutator"] == "head_flip":
            assert max(info["positions"]) < fuzz.HEAD_BYTES
        if info["mutator"] == "truncate":
            assert len(mutant) == info["length"] < len(data)
        if info["mutator"] == "field":
            assert info["old"] != info["new"] or info["new"] != info["new"]  # NaN differs from itself
    assert seen == set(fuzz.MUTATORS)


FAKE_WORKER = """
import os, signal, sys, time
from pathlib import Path
from gpuengine.tools import fuzz
print(fuzz.READY, flush=True)
for line in sys.stdin:
    import json
    request = json.loads(line)
    data = Path(request["path"]).read_bytes()
    if data == b"crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if data == b"hang":
        time.sleep(600)
    if data == b"oom":  # what Rust's allocator prints before it aborts
        sys.stderr.write("memory allocation of 1099511627776 bytes failed\\n"); sys.stderr.flush(); os.abort()
    if data == b"limit":  # 8 GiB of address space: refused only under the worker's RLIMIT_AS (4 GiB here)
        try:
            block = bytearray(8 << 30)
            result = {"outcome": "clean"}
        except MemoryError:
            result = {"outcome": "oom", "message": "MemoryError"}
        print(fuzz.RESULT + json.dumps(result), flush=True)
        continue
    print(fuzz.RESULT + json.dumps(fuzz.run_case(data, request["seed"])), flush=True)
"""


def test_runner_tells_outcomes_apart(tmp_path: Path) -> None:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    runner = fuzz.Runner(tmp_path, timeout_s=8, memory_mb=4096, command=[sys.executable, str(script)])
    try:
        outcomes = {name: runner.run(data, 0) for name, data in [
            ("clean", zoo.get("tiny")), ("crash", b"crash"), ("after_crash", zoo.get("tiny")),
            ("truncated", zoo.get("tiny")[:100]), ("oom", b"oom"), ("limit", b"limit"), ("hang", b"hang"),
            ("after_hang", zoo.get("tiny"))]}
    finally:
        runner.close()
    assert {k: v["outcome"] for k, v in outcomes.items()} == {
        "clean": "clean", "crash": "crash", "after_crash": "clean", "truncated": "model_error", "oom": "oom",
        "limit": "oom", "hang": "hang", "after_hang": "clean"}
    assert "SIGSEGV" in outcomes["crash"]["message"]
    assert outcomes["hang"]["seconds"] >= 8
    assert runner.started == 5  # a fresh worker after the crash, each OOM and the hang
