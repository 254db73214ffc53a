"""Work decompositions: every one a kernel offers is correct (here, on lavapipe), the target's policy picks as
documented, the tuning cache can override it, and the runtime records each invoke's commands ahead of time.

Correctness is checked by swapping each decomposition into a compiled program (GpuProgram.replace) and comparing
the whole model with LiteRT: tiles of every shape, splits with both reductions (workgroup memory and subgroup
shuffles; lavapipe's subgroups are 8 wide, so splits of 2..8 stay inside one and 16+ span several), and a
doubled number of tiles per workgroup.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine import Interpreter
from gpuengine.lowering.kernels.base import Decomposition
from gpuengine.model.builder import ModelBuilder
from gpuengine.oracle import random_inputs, relative_error, run_litert
from gpuengine.tuning.cache import TuningCache
from gpuengine.zoo.mobilenet import Net

# -- models, one per decomposed kernel family ------------------------------------------------------------------


def conv_1x1() -> bytes:
    """1x1 convs over 35 pixels, 130 -> 22 channels (33 input slices: splits up to 16), batch 2, with a fused
    ADD (epilogue) and a residual ADD whose operands are read elsewhere too, so it is folded into the next 1x1
    conv's loads (prologue)."""
    net = Net(1, "1x1")
    x = net.input("x", (2, 5, 7, 130))
    a = net.conv(x, 22, 1, 1, "RELU6", name="a")
    bias = net.mb.const("shift", np.linspace(-1, 1, 22).astype(np.float32))
    net.shapes[bias] = (22,)
    b = net.binary("ADD", net.conv(a, 22, 1, 1, "NONE", name="b"), bias)
    s = net.binary("ADD", a, b, name="sum")
    return net.build(net.conv(s, 9, 1, 1, "RELU", name="c"), a, b)


def conv_general() -> bytes:
    """3x3 stride 2 and 5x5 stride 1 convs (general kernel) after a first-layer conv of 3 channels."""
    net = Net(2, "general")
    x = net.input("x", (1, 9, 11, 3))
    x = net.conv(x, 20, 3, 1, "RELU", name="first")
    x = net.conv(x, 12, 3, 2, "RELU6", name="s2")
    return net.build(net.conv(x, 7, 5, 1, "NONE", name="k5"))


def depthwise() -> bytes:
    net = Net(3, "depthwise")
    x = net.input("x", (1, 8, 9, 10))
    x = net.dwconv(x, 3, 1, "RELU6", name="s1")
    x = net.dwconv(x, 3, 2, "NONE", name="s2")
    return net.build(net.dwconv(x, 5, 1, "RELU", name="k5"))


def fully_connected() -> bytes:
    """Three rows of 40 -> 9, and one row of 300 -> 10 (a GEMV)."""
    rng = np.random.default_rng(4)
    mb = ModelBuilder()
    x = mb.input("x", (3, 40))
    w = mb.const("w", (rng.standard_normal((9, 40)) / 6).astype(np.float32))
    y = mb.op("FULLY_CONNECTED", [x, w, mb.const("b", rng.standard_normal(9).astype(np.float32))], (3, 9),
              {"fused_activation_function": "RELU"})
    v = mb.input("v", (1, 300))
    u = mb.op("FULLY_CONNECTED", [v, mb.const("w2", (rng.standard_normal((10, 300)) / 17).astype(np.float32)), -1],
              (1, 10), {"fused_activation_function": "NONE"})
    mb.output(y, u)
    return mb.build()


def fully_connected_int8() -> bytes:
    """Hybrid FC (int8 weights per channel, float rows quantized as LiteRT does) over two rows of 66 (17 words per
    row: splits up to 8), with an RMSNorm as its prologue and gate and up projections of 8 merged (one gated
    dispatch: the norm's, the range's and the sums' reductions all split; tiles of 2 and 4 slices)."""
    from gpuengine.model.ir import Quantization
    from gpuengine.zoo.vit import rms_norm

    rng = np.random.default_rng(6)
    mb = ModelBuilder()
    x = mb.input("x", (2, 66))

    def weights(name: str, o: int) -> int:
        w = rng.standard_normal((o, 66)).astype(np.float32)
        scale = (np.abs(w).max(axis=1) / 127).astype(np.float32)
        return mb.const(name, np.round(w / scale[:, None]).astype(np.int8), np.int8,
                        Quantization(scale=scale, zero_point=np.zeros(o, np.int64), axis=0))

    y = rms_norm(mb, x, (2, 66), rng.uniform(0.5, 1.5, 66))
    gate = mb.op("FULLY_CONNECTED", [y, weights("gate", 8), -1], (2, 8))
    up = mb.op("FULLY_CONNECTED", [y, weights("up", 8), -1], (2, 8))
    silu = mb.op("MUL", [gate, mb.op("LOGISTIC", [gate], (2, 8))], (2, 8))
    mb.output(mb.op("MUL", [silu, up], (2, 8)))
    return mb.build()


def batch_matmul() -> bytes:
    mb = ModelBuilder()
    a = mb.input("a", (2, 5, 24))
    b = mb.input("b", (2, 7, 24))
    mb.output(mb.op("BATCH_MATMUL", [a, b], (2, 5, 7), {"adj_x": False, "adj_y": True}))
    return mb.build()


def reductions() -> bytes:
    """MEAN over pixels, SUM over a long channel axis, REDUCE_MAX over both."""
    mb = ModelBuilder()
    x = mb.input("x", (2, 9, 10, 6))
    mean = mb.op("MEAN", [x, mb.const("hw", np.array([1, 2], np.int32))], (2, 1, 1, 6), {"keep_dims": True})
    y = mb.input("y", (1, 4, 5, 70))
    total = mb.op("SUM", [y, mb.const("c", np.array([3], np.int32))], (1, 4, 5), {"keep_dims": False})
    big = mb.op("REDUCE_MAX", [y, mb.const("all", np.array([1, 2, 3], np.int32))], (1,), {"keep_dims": False})
    mb.output(mean, total, big)
    return mb.build()


def normalizations() -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 3, 4, 70))
    mb.output(mb.op("SOFTMAX", [x], (1, 3, 4, 70), {"beta": 1.0}), mb.op("L2_NORMALIZATION", [x], (1, 3, 4, 70)))
    return mb.build()


MODELS = {"conv_1x1": conv_1x1, "conv_general": conv_general, "depthwise": depthwise,
          "fully_connected": fully_connected, "fully_connected_int8": fully_connected_int8,
          "batch_matmul": batch_matmul, "reductions": reductions,
          "normalizations": normalizations}


def _outputs(it: Interpreter, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_decomposition_matches_litert(name):
    data = MODELS[name]()
    feeds = random_inputs(data, seed=5)
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json")
    it.allocate_tensors()
    (prog,) = it.compiled.gpu_programs
    checked = 0
    for index, dispatch in enumerate(list(prog.dispatches)):
        variants = dispatch.spec.variants
        if variants is None:
            continue
        first = variants.candidates[0]
        doubled = Decomposition(first.tile, first.split, first.group * 2, first.subgroup)
        for d in [*variants.candidates, doubled]:
            prog.replace(index, d)
            got = _outputs(it, feeds)
            for t, r in ref.items():
                err = relative_error(got[t], r)
                assert err <= 1e-4, f"{dispatch.spec.label}: {d} gives output {t} off by {err:.3g}"
            checked += 1
    assert checked >= 3


def test_splits_exercise_both_reductions_across_subgroups():
    """The 1x1 conv's candidates include splits inside one lavapipe subgroup (<= 8) and across several (16)."""
    data = conv_1x1()
    it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json")
    it.allocate_tensors()
    spec = next(d.spec for d in it.compiled.gpu_programs[0].dispatches if d.spec.shader == "conv2d_1x1")
    splits = {(d.split, d.subgroup) for d in spec.variants.candidates}
    assert {(1, False), (2, True), (8, True), (16, True), (16, False)} <= splits


# -- the target and its policy --------------------------------------------------------------------------------


def test_interpreter_target_option(tmp_path):
    from gpuengine import zoo

    with pytest.raises(ValueError, match="target 'fast' is not one of"):
        Interpreter(model_content=zoo.get("tiny"), target="fast")
    it = Interpreter(model_content=zoo.get("tiny"), target="discrete", workgroup_cache=str(tmp_path / "c.json"))
    it.allocate_tensors()
    assert it.compiled.target.name == "discrete" and not it.compiled.target.detected
    assert "target: discrete (chosen" in it.describe()


# -- the tuning cache overrides the policy ----------------------------------------------------------------------


def test_cache_decomposition_is_used_and_invalid_ones_ignored(tmp_path):
    data = conv_1x1()
    plain = Interpreter(model_content=data, target="cpu", workgroup_cache=str(tmp_path / "none.json"))
    plain.allocate_tensors()
    prog = plain.compiled.gpu_programs[0]
    index = next(i for i, d in enumerate(prog.dispatches) if d.spec.shader == "conv2d_1x1")
    spec = prog.dispatches[index].spec
    chosen = Decomposition((1, 1), 4, 16, True)
    assert chosen != spec.decomposition
    cache = TuningCache(tmp_path / "tuned.json")
    cache.record(prog.gpu.cache_key(), prog.gpu.name, spec.variants.problem, chosen, 2.0, 1.0)
    cache.save()
    assert TuningCache(cache.path).tuned(prog.gpu.cache_key()).decompositions == {spec.variants.problem: chosen}
    tuned = Interpreter(model_content=data, target="cpu", workgroup_cache=str(cache.path))
    tuned.allocate_tensors()
    assert tuned.compiled.gpu_programs[0].dispatches[index].spec.decomposition == chosen
    assert tuned.compiled.tuned_dispatches >= 1
    feeds = random_inputs(data, seed=2)
    a, b = _outputs(plain, feeds), _outputs(tuned, feeds)
    for t in a:
        assert relative_error(b[t], a[t]) <= 1e-5
    # A split the kernel does not offer (130 channels: at most 16 ways) is ignored, not run.
    cache.record(prog.gpu.cache_key(), prog.gpu.name, spec.variants.problem, Decomposition((1, 1), 64, 1, True),
                 2.0, 1.0)
    cache.save()
    ignored = Interpreter(model_content=data, target="cpu", workgroup_cache=str(cache.path))
    ignored.allocate_tensors()
    assert ignored.compiled.gpu_programs[0].dispatches[index].spec.decomposition == spec.decomposition


# -- recording ahead ----------------------------------------------------------------------------------------------


def test_each_invoke_submits_commands_recorded_in_advance(monkeypatch):
    """allocate_tensors records the first invoke's command buffer; each invoke records the next one after
    submitting its own, so recording never precedes a submit."""
    from gpuengine import zoo
    from gpuengine.runtime.program import GpuProgram

    events: list[str] = []
    encode, submit = GpuProgram._encode, GpuProgram._submit

    def counting_encode(self, slot):
        events.append("record")
        return encode(self, slot)

    def counting_submit(self, *args, **kwargs):
        events.append("submit")
        return submit(self, *args, **kwargs)

    monkeypatch.setattr(GpuProgram, "_encode", counting_encode)
    it = Interpreter(model_content=zoo.get("tiny"), max_inflight=1)
    it.allocate_tensors()
    assert events == ["record"]
    prog = it.compiled.gpu_programs[0]
    monkeypatch.setattr(GpuProgram, "_submit", counting_submit)
    it.invoke()
    it.invoke()
    assert events == ["record", "submit", "record", "submit", "record"]
    assert prog.phases.submit >= 0 and prog.phases.record_next > 0


def test_raw_and_wrapper_recording_give_identical_results(monkeypatch):
    from gpuengine import zoo

    data = zoo.get("segmentation")
    feeds = random_inputs(data, seed=3)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    raw = _outputs(it, feeds)
    prog = it.compiled.gpu_programs[0]
    assert prog._record.__name__ == "record_raw"
    import builtins

    real_import = builtins.__import__

    def no_native(name, *args, **kwargs):
        if name.endswith("wgpu_native._api"):
            raise ImportError("simulated: no wgpu-native internals")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_native)
    prog._record = prog._recorder()
    monkeypatch.undo()
    assert prog._record.__name__ == "record"
    prog._drop_recorded()
    wrapped = _outputs(it, feeds)
    for t in raw:
        np.testing.assert_array_equal(raw[t], wrapped[t])
