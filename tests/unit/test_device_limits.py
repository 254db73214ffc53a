"""Plans against WebGPU's default limits, without a GPU (issue 31 item 4): every dispatch of the zoo, the MediaPipe
models and the decoders' signatures (the zoo's and ../shared/models'), decomposed for the GPU adapter classes on a
device without the subgroup feature, binds at most 8 storage buffers of at most 128 MiB, launches at most 256
invocations per workgroup and declares at most 16 KiB of workgroup memory (lowering/device_fit.py, which the
runtime also runs before any submit); and the checker itself names each limit a dispatch exceeds.
tests/models/test_baseline_device.py runs the same models on a baseline device.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import FIXTURES, REFERENCE_MODELS, SHARED_MODELS, cached_reference_model

from gpuengine import zoo
from gpuengine.latency.limits import BASELINE, DEFAULT_LIMITS, DeviceLimits, check_profile
from gpuengine.latency.target import named
from gpuengine.lowering import codegen
from gpuengine.lowering.device_fit import violations
from gpuengine.lowering.dispatches import Choices, signature
from gpuengine.lowering.kernels.base import Binding, KernelSpec
from gpuengine.lowering.kernels.tuned import Tuned
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Graph
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions, engine_options
from gpuengine.planning import planned_dispatches

# the adapter classes whose decompositions split reductions (workgroup memory) and fill 256-invocation workgroups;
# a CPU adapter's ("cpu") take neither
SPLITTING_TARGETS = ("discrete", "integrated")


def graphs() -> list[tuple[str, bytes | None, str | None]]:
    """(name, model bytes or None for a cached reference model, signature key)."""
    items: list[tuple[str, bytes | None, str | None]] = [(n, None, None) for n in sorted(zoo.MODELS)
                                                         if n != "decoder_tiny"]
    items += [("decoder_tiny", None, key) for key in ("prefill_8", "decode")]
    items += [(n, None, None) for n in REFERENCE_MODELS]
    items += [("toy_decoder_kv", None, key) for key in ("prefill", "decode")]
    items += [("smollm_4l_int8", None, key) for key in ("prefill_32", "decode")]  # int8 weights in binding chunks
    return items


def model_bytes(name: str) -> bytes:
    if name in zoo.MODELS:
        return zoo.get(name)
    if name in ("toy_decoder_kv", "smollm_4l_int8"):
        path = SHARED_MODELS / f"{name}.tflite"
        if not path.exists():
            pytest.skip(f"{path} is absent (the shared test models)")
        return path.read_bytes()
    return cached_reference_model(name)


@pytest.mark.parametrize("name,_,key", graphs(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_dispatch_fits_the_default_limits(name: str, _: None, key: str | None) -> None:
    model = read_model(model_bytes(name))
    graph = model.main if key is None else model.subgraphs[{s.key: s for s in model.signatures}[key].subgraph]
    for target in SPLITTING_TARGETS:
        plan, partitions = planned_dispatches(graph, EngineOptions(), named(target, subgroups=False), model)
        specs = [spec for specs in partitions for spec in specs]
        assert specs, f"{name}: no GPU dispatch planned for {target}"
        problems = [p for spec in specs for p in violations(spec, BASELINE, plan.graph, "fp32")]
        assert not problems, f"{name} ({target}): {problems[:5]}"
        assert all(spec.decomposition is None or not spec.decomposition.subgroup for spec in specs)


def spec_with(bindings: int = 2, workgroup: tuple[int, int, int] = (64, 1, 1)) -> tuple[KernelSpec, Graph]:
    """A copy kernel's dispatch over a small tensor, with `bindings` constant buffers."""
    graph = Graph(tensors=[], ops=[], inputs=[], outputs=[])
    spec = KernelSpec(shader="copy", params={}, bindings=[Binding(f"b{i}", data=np.zeros(16, np.float32), bake=False)
                                                          for i in range(bindings)],
                      grid=(64, 1, 1), workgroup=workgroup)
    return spec, graph


def test_the_checker_names_each_limit() -> None:
    spec, graph = spec_with(bindings=9, workgroup=(512, 1, 1))
    source = "var<workgroup> lanes: array<vec4<f32>, 2048>;\nfn f() { let s = subgroupAdd(1.0); let h = f16(1.0); }"
    problems = violations(spec, BASELINE, graph, "fp32", source)
    assert any("9 storage buffers, more than the device's 8" in p for p in problems), problems
    assert any("workgroup (512, 1, 1) exceeds the device's 256 invocations" in p for p in problems), problems
    assert any("32768 bytes of workgroup memory, more than the device's 16384" in p for p in problems), problems
    assert any("subgroup" in p for p in problems) and any("shader-f16" in p for p in problems), problems
    assert all(p.startswith("kernel copy") for p in problems)
    full = DeviceLimits.of({**DEFAULT_LIMITS, "max-storage-buffers-per-shader-stage": 16,
                            "max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-size-x": 1024,
                            "max-compute-workgroup-storage-size": 32768}, ("subgroup", "shader-f16"))
    assert violations(spec, full, graph, "fp32", source) == []
    big = dataclasses.replace(spec, bindings=[Binding("w", data=np.zeros((1 << 25) + 4, np.float32))],
                              workgroup=(64, 1, 1))
    assert any("storage binding limit of 134217728 bytes" in p for p in violations(big, BASELINE, graph, "fp32", ""))
    # an undeclared-size workgroup array is reported, not silently passed
    odd = violations(spec_with()[0], BASELINE, graph, "fp32", "var<workgroup> x: array<f32, N>;")
    assert any("cannot check" in p for p in odd), odd


def test_tuned_workgroups_beyond_the_device_are_not_used() -> None:
    spec, _ = spec_with(workgroup=None)
    spec.grid = (1024, 1, 1)
    tuned = Tuned()
    tuned.workgroups[signature(spec)] = (512, 1, 1)  # tuned on a device allowing 1024 invocations
    wide = DeviceLimits.of({**DEFAULT_LIMITS, "max-compute-invocations-per-workgroup": 1024,
                            "max-compute-workgroup-size-x": 1024})
    assert Choices(named("discrete"), tuned, wide).workgroup(spec) == (512, 1, 1)
    baseline = Choices(named("discrete", subgroups=False), tuned, BASELINE)
    assert np.prod(baseline.workgroup(spec)) <= 256 and baseline.from_cache == 0


def test_device_profile_option(monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine_options().device_profile == "full"
    assert engine_options(device_profile=" Baseline ").device_profile == "baseline"
    monkeypatch.setenv("GPUENGINE_DEVICE", "baseline")
    assert engine_options().device_profile == "baseline" and check_profile(None) == "baseline"
    monkeypatch.setenv("GPUENGINE_DEVICE", "tiny")
    with pytest.raises(ValueError, match="GPUENGINE_DEVICE 'tiny' is not one of full, baseline"):
        engine_options()
    with pytest.raises(ValueError, match="device_profile 'small' is not one of full, baseline"):
        engine_options(device_profile="small")
    with pytest.raises(ValueError, match="a device passed in runs with its own features and limits"):
        engine_options(device_profile="baseline", device=type("Device", (), {"queue": None})())


def test_epilogue_fusion_stops_at_the_storage_buffer_limit() -> None:
    """A chain of ADDs, each with another run-time operand, fuses into one dispatch on a device with many storage
    buffers; on a baseline device the chain is cut where one more operand would make a 9th binding."""
    mb = ModelBuilder()
    shape = (1, 8, 8, 4)
    t = mb.input("x", shape)
    for k in range(9):
        t = mb.op("ADD", [t, mb.input(f"a{k}", shape)], shape)
    mb.output(t)
    model = read_model(mb.build())
    wide = DeviceLimits.of({**DEFAULT_LIMITS, "max-storage-buffers-per-shader-stage": 32})
    counts = {}
    for name, limits in (("wide", wide), ("baseline", BASELINE)):
        plan, (specs,) = planned_dispatches(model.main, EngineOptions(), named("integrated", subgroups=False),
                                            model, limits)
        adds = [s for s in specs if s.shader == "elementwise"]
        counts[name] = [len(codegen.bound(s)) for s in adds]
        assert not [p for s in specs for p in violations(s, limits, plan.graph, "fp32")], name
    assert counts["wide"] == [11]  # x, a0..a8 and the output: one dispatch
    assert len(counts["baseline"]) == 2 and max(counts["baseline"]) == 8, counts


def test_what_each_profile_asks_the_adapter_for() -> None:
    """A baseline device asks for no feature and exactly WebGPU's defaults (wgpu-native would otherwise hand out
    the adapter's limits); a full one for the engine's features the adapter has and the adapter's own limits."""
    from gpuengine.runtime.device import device_request

    adapter = type("Adapter", (), {"features": {"shader-f16", "subgroup", "texture-compression-bc"},
                                   "limits": {**{n: 2 * v for n, v in DEFAULT_LIMITS.items()},
                                              "max-texture-dimension-2d": 16384}})()
    features, limits = device_request(adapter, "baseline")
    assert features == [] and limits == DEFAULT_LIMITS
    features, limits = device_request(adapter, "full")
    assert sorted(features) == ["shader-f16", "subgroup"]
    assert limits["max-storage-buffers-per-shader-stage"] == 16
    assert limits["max-compute-workgroup-storage-size"] == 32768
    assert DeviceLimits.of(limits, features).subgroups and not BASELINE.subgroups and not BASELINE.f16


@pytest.mark.parametrize("name", sorted(p.stem for p in (FIXTURES / "litert_torch").glob("*.tflite")))
def test_litert_torch_decoders_split_their_cache_writes_to_fit(name: str) -> None:
    """The litert-torch fixtures' KV cache writes shared by one dispatch (Gemma 3's and Qwen 3's q/k norms folded in:
    10 storage buffers; the transposed-cache prefills: 9 or 11) are planned as one dispatch per write for a baseline
    device, so every signature fits 8; a report for a full device keeps the shared dispatch (today's plan). So does a
    QKV projection with the write as its epilogue that binds more than 8 (int4 blockwise weights: 9): the projection
    and the write as two dispatches."""
    model = read_model((FIXTURES / "litert_torch" / f"{name}.tflite").read_bytes())
    target = named("integrated", subgroups=False)
    for entry in model.signatures:
        graph = model.subgraphs[entry.subgraph]
        plan, parts = planned_dispatches(graph, EngineOptions(device_profile="baseline"), target, model)
        specs = [spec for specs in parts for spec in specs]
        assert not [p for spec in specs for p in violations(spec, BASELINE, plan.graph, "fp32")], entry.key
        _, full = planned_dispatches(graph, EngineOptions(), target, model)
        shared = [len(codegen.bound(spec)) for specs in full for spec in specs if spec.shader == "kv_cache"]
        # a QKV projection carrying the write (kernels/kv_epilogue.py) over the limit: the projection, then the write
        fused = [len(codegen.bound(spec)) for specs in full for spec in specs if "epilogue (" in spec.label]
        split = sum("split to fit the device's storage buffers" in spec.label for spec in specs)
        assert split == 3 * sum(n > 8 for n in shared) + 2 * sum(n > 8 for n in fused), (entry.key, shared, split)
        assert len(specs) == sum(map(len, full)) + 2 * sum(n > 8 for n in shared) + sum(n > 8 for n in fused), \
            entry.key
