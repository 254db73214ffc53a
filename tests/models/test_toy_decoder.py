"""litert-torch's toy decoder (KV cache, prefill and decode signatures) through gpuengine's Interpreter, every
output of both signatures compared with LiteRT's."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import REPO_ROOT, SHARED_MODELS

MODEL = SHARED_MODELS / "toy_decoder_kv.tflite"

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} is absent (the shared test models)")


def signature_feeds(runner, seed: int, position: int = 0) -> dict[str, np.ndarray]:
    """Token ids within the vocabulary, positions from `position` on, a random (small) KV cache."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, detail in runner.get_input_details().items():
        shape = tuple(detail["shape"])
        if name == "tokens":
            feeds[name] = rng.integers(0, VOCAB, shape).astype(np.int32)
        elif name == "input_pos":
            feeds[name] = (position + np.arange(shape[0])).astype(np.int32)
        else:
            feeds[name] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
    return feeds


VOCAB = 150  # rows of the embedding table (checked in test_vocabulary_size)


@pytest.fixture(scope="module")
def interpreters():
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    return Interpreter(model_path=str(MODEL)), LiteRT(model_path=str(MODEL))


def test_vocabulary_size():
    from gpuengine.model.reader import read_model

    model = read_model(str(MODEL))
    tables = [model.subgraphs[s.subgraph].tensors[op.inputs[1]] for s in model.signatures
              for op in model.subgraphs[s.subgraph].ops if op.code == "EMBEDDING_LOOKUP"]
    assert tables and all(t.shape[0] == VOCAB for t in tables)


@pytest.mark.parametrize("key,position", [("prefill", 0), ("decode", 0), ("decode", 57), ("decode", 99)])
def test_signature_matches_litert(interpreters, key: str, position: int):
    ours, litert = interpreters
    runner, reference = ours.get_signature_runner(key), litert.get_signature_runner(key)
    feeds = signature_feeds(runner, seed=position + len(key), position=position)
    got, want = runner(**feeds), reference(**feeds)
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype, name
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-4, err_msg=name)
    plan = runner.compiled.plan  # every op on the GPU: composites inlined, int32 / bool masks and lookups too
    assert [p.device for p in plan.partitions] == ["gpu"] and plan.ops_gpu == len(plan.graph.ops)


@pytest.mark.parametrize("key", ["prefill", "decode"])
def test_fp16_keeps_integers_exact(key: str):
    """In fp16 (tensors stored as f16) the token ids, positions and masks stay f32: only float rounding differs."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    runner = Interpreter(model_path=str(MODEL), precision="fp16").get_signature_runner(key)
    feeds = signature_feeds(runner, seed=5, position=0 if key == "prefill" else 63)
    got, want = runner(**feeds), LiteRT(model_path=str(MODEL)).get_signature_runner(key)(**feeds)
    if runner.compiled.precision != "fp16":
        pytest.skip("the adapter has no shader-f16")
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-2, err_msg=name)


def test_inspect_signature_reports_that_signatures_plan(capsys):
    """inspect --signature KEY: the plan of that signature's graph (its op count, its input shapes)."""
    import json

    from gpuengine.tools.cli import main

    from gpuengine.model.reader import read_model

    model = read_model(str(MODEL))
    reports = {}
    for key in ("prefill", "decode"):
        assert main(["inspect", str(MODEL), "--signature", key, "--json"]) == 0
        reports[key] = json.loads(capsys.readouterr().out)
    for key, report in reports.items():
        sig = next(s for s in model.signatures if s.key == key)
        assert report["signature"] == key
        assert report["ops_in_file"] == len(model.subgraphs[sig.subgraph].ops)
        assert report["dispatches"] == len(report["dispatch_list"]) > 0
    assert [1, 100] in reports["prefill"]["input_shapes"] and [1, 1] in reports["decode"]["input_shapes"]
    with pytest.raises(SystemExit, match="available"):
        main(["inspect", str(MODEL), "--signature", "nope"])


@pytest.mark.parametrize("key,token,position", [("decode", VOCAB, 3), ("decode", -1, 3), ("decode", 5, 100),
                                                ("decode", 5, -101), ("prefill", VOCAB, 0), ("prefill", 7, 1)])
def test_out_of_range_token_or_position_raises_as_litert(interpreters, key: str, token: int, position: int):
    """A token id outside the vocabulary, or a position outside the cache (the rotary tables' rows), raises
    LiteRT's RuntimeError naming the same node, before anything runs on the GPU; never a clamped row."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    ours = interpreters[0].get_signature_runner(key)
    feeds = signature_feeds(ours, seed=3, position=position)
    feeds["tokens"][0, -1] = token  # prefill at position 1: positions 1..100, the last one past the cache
    with pytest.raises(RuntimeError) as theirs:
        LiteRT(model_path=str(MODEL)).get_signature_runner(key)(**feeds)
    with pytest.raises(RuntimeError) as got:
        ours(**feeds)
    node = str(got.value).split(" failed to invoke")[0].split(". ")[-1]  # "Node number 11 (GATHER_ND)"
    assert node.startswith("Node number") and node in str(theirs.value)
    name = "'tokens'" if "EMBEDDING_LOOKUP" in node else "'input_pos'"
    assert name in str(got.value) and "valid [0, " in str(got.value)


def load_generate():
    import importlib.util

    path = REPO_ROOT / "examples" / "generate.py"
    spec = importlib.util.spec_from_file_location("generate_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_greedy_decode_with_cache_on_gpu_matches_litert():
    """examples/generate.py's decode loop: the same tokens as LiteRT's greedy decode; a decode step uploads only
    the token and the position (8 bytes) and reads back only the logits; the cache the GPU kept equals LiteRT's."""
    from gpuengine import Interpreter

    generate = load_generate()
    prompt, steps = [3, 14, 15, 92, 65], 6
    interpreter = Interpreter(model_path=str(MODEL))
    ours, _ = generate.generate_gpu(interpreter, prompt, steps)
    theirs, _ = generate.generate_litert(MODEL, prompt, steps)
    assert ours == theirs
    decode = interpreter.get_signature_runner("decode")
    program = decode.compiled.gpu_programs[0]
    names = {t: n for n, t in decode._sig.inputs.items()}  # noqa: SLF001 - tensor -> signature name
    assert {names[t]: size for t, size in program.uploaded.items()} == {"tokens": 4, "input_pos": 4}
    # one more step reading every output: the cache carried on the GPU equals LiteRT's, step by step on the host
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    litert = LiteRT(model_path=str(MODEL))
    prefill, reference = litert.get_signature_runner("prefill"), litert.get_signature_runner("decode")
    out = prefill(**generate.prefill_feeds(prefill, prompt))
    caches = {n: out[n] for n in generate.cache_names(reference)}
    tokens = theirs + [None]
    for k in range(steps):
        out = reference(**generate.step_feeds(tokens[k], len(prompt) + k), **caches)
        caches = {n: out[n] for n in caches}
    got = decode.run(generate.step_feeds(theirs[-1], len(prompt) + steps - 1))
    assert {names[t] for t in program.uploaded} == {"tokens", "input_pos"}
    for name in [*caches, "logits"]:
        np.testing.assert_allclose(got[name], out[name], rtol=0, atol=1e-4, err_msg=name)
    only_logits = decode.run(generate.step_feeds(theirs[-1], len(prompt) + steps), outputs=["logits"])
    assert set(only_logits) == {"logits"}


def test_signatures_share_weight_buffers():
    """prefill and decode read the same weights: each is uploaded once per device (runtime/program.py
    shared_constant), both programs bind the same buffers. What one signature binds alone are small position tables:
    decode's mask and cos | sin rows read by the position (passes/fold_position_math.py), prefill's own tables, and
    decode's QKV weights permuted for the KV cache write in their store (kernels/kv_epilogue.py)."""
    from gpuengine import Interpreter
    from gpuengine.model.ops import KV_EPILOGUE

    interpreter = Interpreter(model_path=str(MODEL))
    runners = [interpreter.get_signature_runner(k).compiled for k in ("prefill", "decode")]
    prefill, decode = (r.gpu_programs[0] for r in runners)
    weights = [{id(b): b for b in p._held.values() if b.size >= 1024} for p in (prefill, decode)]  # noqa: SLF001
    shared = set(weights[0]) & set(weights[1])
    # decode's QKV projections carrying the KV cache write (kernels/kv_epilogue.py) read their weights permuted:
    # a copy of their own, the price of the fusion where a prefill signature shares the weights
    graph = runners[1].plan.graph
    permuted = sum(graph.tensors[op.inputs[1]].size * graph.tensors[op.inputs[1]].dtype.itemsize
                   for op in graph.ops if op.opt(KV_EPILOGUE))
    assert sum(weights[1][k].size for k in shared) > 0.8 * (MODEL.stat().st_size - permuted)  # not a few tables
    alone = sorted(b.size for w in weights for k, b in w.items() if k not in shared)
    # prefill's QKV weights as they are and decode's permuted copy: each signature's own
    assert sum(alone) < 0.1 * MODEL.stat().st_size + 2.2 * permuted, (alone, permuted)


def test_bench_signature_reports_decode_steps(capsys):
    """bench MODEL --signature decode: steps per second with the cache on the GPU, through the host, LiteRT CPU."""
    import json

    from gpuengine.tools.cli import main

    assert main(["bench", str(MODEL), "--signature", "decode", "--runs", "3", "--warmup", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["signature"] == "decode"
    assert report["carried_on_gpu"] == ["kv_cache_k_0", "kv_cache_k_1", "kv_cache_v_0", "kv_cache_v_1"]
    for key in ("gpuengine_state_on_gpu_steps_per_s", "gpuengine_through_host_steps_per_s", "litert_cpu_steps_per_s"):
        assert report[key] > 0
