"""Every model on a baseline device (issue 31 item 4): no optional feature (no shader-f16, no subgroups, no timestamp
queries) and WebGPU's default limits (8 storage buffers per stage, 128 MiB per binding, 16 KiB of workgroup memory,
256 invocations), which wgpu-native then enforces. The zoo, the MediaPipe models and a decoder's signatures match
LiteRT as on the full device (the same helpers and tolerances as tests/models/test_zoo.py, test_mediapipe.py and
test_toy_decoder.py). tests/unit/test_device_limits.py checks the same models' plans against the limits without a
GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from decoder_parity import compare
from helpers import (
    FIXTURES,
    REFERENCE_MODELS,
    SHARED_MODELS,
    assert_matches_litert,
    cached_reference_model,
    random_inputs,
    relative_error,
    run_gpuengine,
    run_litert,
)

from gpuengine import Interpreter, UnsupportedOpError, zoo
from gpuengine.latency.limits import DEFAULT_LIMITS
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.zoo import bert

BASELINE = {"device_profile": "baseline"}
TOY_DECODER = SHARED_MODELS / "toy_decoder_kv.tflite"
LITERT_TORCH = sorted(p.stem for p in (FIXTURES / "litert_torch").glob("*.tflite"))
# as tests/models/test_litert_torch_decoders.py: max |ours - LiteRT| / range(LiteRT's logits)
DECODER_TOLERANCE = {"f32": 1e-5, "int8": 5e-2}


def assert_baseline(it: Interpreter) -> None:
    """The interpreter ran on a device opened with no optional feature and exactly WebGPU's default limits, and
    no dispatch chose a decomposition that needs a feature the device lacks."""
    gpu = it.compiled.gpu
    assert gpu.profile == "baseline" and not gpu.features and not gpu.device.features
    assert {n: gpu.device.limits[n] for n in DEFAULT_LIMITS if n in gpu.device.limits} == \
        {n: v for n, v in DEFAULT_LIMITS.items() if n in gpu.device.limits}
    assert not it.compiled.target.subgroups
    for program in it.compiled.all_gpu_programs:
        for d in program.dispatches:
            assert d.spec.decomposition is None or not d.spec.decomposition.subgroup, d.spec.label
            assert np.prod(d.spec.workgroup) <= DEFAULT_LIMITS["max-compute-invocations-per-workgroup"]


ZOO = sorted(set(zoo.MODELS) - {"decoder_tiny"})  # decoder_tiny runs through its signatures below


@pytest.mark.parametrize("name", ZOO)
def test_zoo_matches_litert_on_a_baseline_device(name: str) -> None:
    data = zoo.get(name)
    feeds = None
    if name == "bert_tiny":  # token ids over the whole vocabulary, as test_zoo.py feeds it
        ids, types = bert.token_ids(0)
        graph = read_model(data).main
        feeds = {graph.inputs[0]: ids, graph.inputs[1]: types}
    assert_baseline(assert_matches_litert(data, feeds, tol=1e-4, **BASELINE))


@pytest.mark.parametrize("name", ["vit_tiny", "bert_tiny"])
def test_split_reductions_through_workgroup_memory(name: str) -> None:
    """Decomposed for a discrete GPU, the long reductions (LayerNorm, softmax, the FCs) split across invocations;
    without the subgroup feature they combine through workgroup memory, within 16 KiB, and still match LiteRT."""
    it = assert_matches_litert(zoo.get(name), tol=1e-4, target="discrete", **BASELINE)
    assert_baseline(it)
    splits = [d.spec.label for d in it.compiled.gpu_programs[0].dispatches
              if d.spec.decomposition is not None and d.spec.decomposition.split > 1]
    assert splits and all("shared memory" in label for label in splits), splits


@pytest.mark.models
@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_mediapipe_matches_litert_on_a_baseline_device(name: str) -> None:
    data = cached_reference_model(name)
    feeds = random_inputs(data, seed=1, low=0.0, high=1.0)  # as tests/models/test_mediapipe.py
    got, it = run_gpuengine(data, feeds, **BASELINE)
    assert_baseline(it)
    assert [p.device for p in it.compiled.plan.partitions] == ["gpu"]
    for t, r in run_litert(data, feeds).items():
        assert relative_error(got[t], r) <= 1e-4, f"output {t}"


@pytest.mark.skipif(not TOY_DECODER.exists(), reason=f"{TOY_DECODER} is absent (the shared test models)")
@pytest.mark.parametrize("key,position", [("prefill", 0), ("decode", 57)])
def test_decoder_signatures_match_litert_on_a_baseline_device(key: str, position: int) -> None:
    """litert-torch's toy decoder, as tests/models/test_toy_decoder.py compares it on the full device."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    runner = Interpreter(model_path=str(TOY_DECODER), **BASELINE).get_signature_runner(key)
    rng = np.random.default_rng(position + len(key))
    feeds = {}
    for name, detail in runner.get_input_details().items():
        shape = tuple(detail["shape"])
        if name == "tokens":
            feeds[name] = rng.integers(0, 150, shape).astype(np.int32)
        elif name == "input_pos":
            feeds[name] = (position + np.arange(shape[0])).astype(np.int32)
        else:
            feeds[name] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
    got, want = runner(**feeds), LiteRT(model_path=str(TOY_DECODER)).get_signature_runner(key)(**feeds)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-4, err_msg=name)
    plan = runner.compiled.plan
    assert [p.device for p in plan.partitions] == ["gpu"] and plan.ops_gpu == len(plan.graph.ops)
    assert_baseline(runner)


@pytest.mark.parametrize("name", LITERT_TORCH)
def test_litert_torch_decoders_match_litert_on_a_baseline_device(name: str) -> None:
    """Each litert-torch decoder fixture (Gemma 3, Qwen 2.5 / 3, Llama 3.2, TinyLlama; f32, int8, int4; both cache
    layouts): its prefill and one decode step after it match LiteRT's builtin kernels as on the full device
    (test_litert_torch_decoders.py's tolerances). Where a layer's KV cache writes and query rotation would share a
    dispatch binding 9 to 11 storage buffers (Gemma's and Qwen 3's q/k norms, the transposed caches' prefill), each
    is its own dispatch, and the device's variant notes say so."""
    from gpuengine.oracle import litert_interpreter

    data = (FIXTURES / "litert_torch" / f"{name}.tflite").read_bytes()
    ours = Interpreter(model_content=data, **BASELINE)
    result = compare(ours, litert_interpreter(data, builtin=True), steps=1)
    tolerance = DECODER_TOLERANCE["f32" if "_f32" in name else "int8"]
    assert result.prefill_cache_error <= tolerance and result.max_error <= tolerance, result.summary()
    for key in ours.get_signature_list():
        runner = ours.get_signature_runner(key)
        assert_baseline(runner)
        assert [p.device for p in runner.compiled.plan.partitions] == ["gpu"], key
        notes = runner.compiled.variant_notes()
        separate = [d.spec.label for program in runner.compiled.all_gpu_programs for d in program.dispatches
                    if "split to fit the device's storage buffers" in d.spec.label]
        if separate:
            assert any("as their own dispatches" in note for note in notes), (key, notes)
        bound = [len(d.spec.bindings) for program in runner.compiled.all_gpu_programs for d in program.dispatches]
        assert max(bound) <= 8, (key, max(bound))
    if name.startswith(("gemma3", "qwen3")):  # q/k norms ride in the cache write: it no longer fits in one dispatch
        assert any("as their own dispatches" in n for n in ours.get_signature_runner("decode").compiled.variant_notes())


def test_fp16_on_a_baseline_device_runs_in_fp32_with_a_warning() -> None:
    """No shader-f16: precision="fp16" runs in fp32 storage and arithmetic, says so once, and stays right."""
    with pytest.warns(RuntimeWarning, match="baseline.*fp32 instead of fp16"):
        it = assert_matches_litert(zoo.get("tiny"), tol=1e-4, precision="fp16", **BASELINE)
    assert it.compiled.precision == "fp32"
    assert "precision: fp32 (asked for fp16)" in it.describe()


def test_a_binding_over_the_limit_is_refused_at_allocation() -> None:
    """A tensor larger than a storage binding may be (its input buffer: 2048 x 2048 x 9 f32, 144 MiB) is refused
    while allocating, naming the kernel, the binding and the limit, before anything is submitted (a validation
    error at submit would abort the process). Weights are never refused so: kernels bind them in 128 MiB chunks."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 2048, 2048, 9))
    mb.output(mb.op("ABS", [x], (1, 2048, 2048, 9)))
    it = Interpreter(model_content=mb.build(), **BASELINE)
    with pytest.raises(UnsupportedOpError, match=r"kernel bhwc_to_phwc4 .*binding src of 150994944 bytes exceeds "
                                                 r"the device's storage binding limit of 134217728 bytes"):
        it.allocate_tensors()


def test_a_baseline_device_shared_by_interpreters() -> None:
    """gpuengine.get_device(profile="baseline") opens the device once; interpreters given it run on it, report it,
    and may not ask for another profile beside it."""
    import gpuengine

    device = gpuengine.get_device(profile="baseline")
    assert gpuengine.get_device(profile="baseline") is device and gpuengine.get_device() is not device
    it = assert_matches_litert(zoo.get("tiny"), tol=1e-4, device=device)
    assert_baseline(it)
    assert "device: baseline profile: 8 storage buffers/stage" in it.describe()
    with pytest.raises(ValueError, match="a device passed in runs with its own features and limits"):
        Interpreter(model_content=zoo.get("tiny"), device=device, device_profile="baseline")


def test_a_fused_chain_cut_at_eight_storage_buffers_matches_litert() -> None:
    """Nine ADDs, each with its own run-time operand: fused into one dispatch they would bind 11 storage buffers;
    on a baseline device the chain is cut into dispatches of at most 8, and the result is LiteRT's."""
    mb = ModelBuilder()
    shape = (1, 8, 8, 4)
    t = mb.input("x", shape)
    for k in range(9):
        t = mb.op("ADD", [t, mb.input(f"a{k}", shape)], shape)
    mb.output(t)
    it = assert_matches_litert(mb.build(), tol=1e-5, **BASELINE)
    assert_baseline(it)
    bound = [len(d.spec.bindings) for d in it.compiled.gpu_programs[0].dispatches if d.spec.shader == "elementwise"]
    assert len(bound) == 2 and max(bound) <= 8, bound


def test_a_buffer_over_the_limit_is_refused_at_allocation() -> None:
    """Three outputs of 96 MiB each fit a binding apiece but not one 256 MiB buffer, the baseline's largest: read
    back together, they are refused while allocating, before any buffer is made."""
    mb = ModelBuilder()
    shape = (1, 1024, 1024, 24)
    x = mb.input("x", shape)
    mb.output(*[mb.op(code, [x], shape) for code in ("ABS", "NEG", "RELU")])
    it = Interpreter(model_content=mb.build(), **BASELINE)
    with pytest.raises(UnsupportedOpError, match=r"buffer of \d+ bytes, more than the device's 268435456 per buffer"):
        it.allocate_tensors()


def test_inspect_reports_the_profile_and_the_variants(capsys: pytest.CaptureFixture[str]) -> None:
    """`gpuengine inspect --device-profile baseline` names the profile, its limits and the reduction variant split
    kernels took; the text report says the same."""
    import json

    from gpuengine.tools.cli import main

    assert main(["inspect", "vit_tiny", "--json", "--device-profile", "baseline", "--target", "discrete"]) == 0
    device = json.loads(capsys.readouterr().out)["device"]
    assert device["profile"] == "baseline" and "features: none" in device["limits"]
    assert device["variants"] == ["31 split reductions through workgroup memory (no subgroup feature)"]
    assert main(["inspect", "vit_tiny", "--device-profile", "baseline", "--target", "discrete"]) == 0
    assert "kernel variants: 31 split reductions through workgroup memory" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:  # a usage mistake: exit 2, one line
        main(["inspect", "tiny", "--device-profile", "small"])
    assert bad.value.code == 2 and "device_profile 'small' is not one of full, baseline" in str(bad.value)
