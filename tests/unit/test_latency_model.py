"""The latency model as arithmetic (gpuengine/latency): predictions grow with bytes and work, never fall below
the floor, fill the device's lanes before they grow with the total; the built-in device table, the adapter
classes, the default workgroups, the policy's choice on a synthetic kernel offer, a lowered op's prediction and the
tuned choices the runtime reads. No GPU adapter, no LiteRT, no shader compiled."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpuengine.latency import devices, latency, policy, target
from gpuengine.latency.defaults import default_workgroup
from gpuengine.latency.latency import Device, DispatchCost, ModelPrediction
from gpuengine.lowering.kernels import tuned
from gpuengine.lowering.kernels.base import Decomposition, Variants
from gpuengine.lowering.kernels.dispatch_cost import op_ns
from gpuengine.model.builder import ModelBuilder
from gpuengine.tuning.cache import TuningCache

H100 = devices.built_in("h100")


def cost(bytes_read: int = 1 << 20, work: float = 100.0, invocations: int = 4096, macs: int = 1 << 20,
         **extra) -> DispatchCost:
    return DispatchCost(invocations=invocations, active=invocations, workgroups=max(1, invocations // 64),
                        work=work, bytes_read=bytes_read, bytes_written=bytes_read // 4, macs=macs, **extra)


# -- predictions ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", devices.names())
def test_predictions_grow_with_bytes_and_work_and_stay_above_the_floor(name):
    device = devices.built_in(name)
    by_bytes = [latency.predict_ns(cost(bytes_read=b), device) for b in (1 << 10, 1 << 16, 1 << 22, 1 << 28)]
    by_work = [latency.predict_ns(cost(work=w), device) for w in (1.0, 10.0, 1e3, 1e5)]
    assert by_bytes == sorted(by_bytes) and by_bytes[-1] > by_bytes[0]
    assert by_work == sorted(by_work) and by_work[-1] > by_work[0]
    by_macs = [latency.floor_ns(cost(macs=m), device) for m in (1, 1 << 20, 1 << 30, 1 << 40)]
    assert by_macs == sorted(by_macs) and by_macs[-1] > by_macs[0]
    for c in (cost(), cost(bytes_read=1 << 28), cost(macs=1 << 40), cost(work=1e5)):
        assert latency.predict_ns(c, device) >= latency.floor_ns(c, device) >= device.dispatch_ns


def test_below_one_wave_time_is_one_invocations_latency_above_it_the_total_work():
    lanes = H100.concurrent
    assert latency.waves(cost(invocations=64), H100) == 1.0
    assert latency.waves(cost(invocations=lanes), H100) == 1.0
    assert latency.waves(cost(invocations=4 * lanes), H100) == 4.0
    # (no bytes: an invocation's stores would depend on how many share them)
    few, full, double = (latency.compute_ns(cost(bytes_read=0, invocations=n), H100) for n in (64, lanes, 2 * lanes))
    assert few == full and double == pytest.approx(2 * full)


def test_an_idle_simd_group_costs_nothing_a_partly_busy_one_its_whole_width():
    many = dataclasses.replace(cost(invocations=8 * H100.concurrent), active=H100.concurrent + 1)
    assert latency.waves(many, H100) == pytest.approx((H100.concurrent + H100.lanes) / H100.concurrent)


def test_bytes_within_the_cache_move_faster():
    inside = cost(bytes_read=H100.cache_bytes // 2)
    assert latency.memory_ns(inside, H100) == pytest.approx(inside.bytes / H100.cache_speedup / H100.bandwidth_gbs)
    beyond = cost(bytes_read=8 * H100.cache_bytes)
    assert latency.memory_ns(beyond, H100) > beyond.bytes / H100.cache_speedup / H100.bandwidth_gbs


def test_a_models_prediction_adds_its_fixed_costs():
    costs = [cost(), cost(bytes_read=1 << 24)]
    rows = [(c, latency.predict_ns(c, H100), latency.floor_ns(c, H100)) for c in costs]
    prediction = ModelPrediction(H100, rows)
    assert prediction.gpu_ns == pytest.approx(sum(p for _, p, _ in rows))
    assert prediction.total_ns == pytest.approx(prediction.gpu_ns + H100.submit_ns + 2 * H100.recording_ns)
    assert prediction.ratio >= 1.0
    assert ModelPrediction(H100, []).ratio == math.inf


def test_split_reductions_cost_barriers_or_shuffles():
    assert latency.split_barriers(Decomposition((1, 1), 8, 8)) == 5  # log2(8) + 2
    assert latency.split_barriers(Decomposition((1, 1), 8, 8, subgroup=True)) == 0
    assert latency.split_shuffles(Decomposition((2, 2), 8, 8, subgroup=True)) == 3 * 4
    assert latency.lane_memory(Decomposition((1, 2), 1, 64)) == 0
    assert latency.lane_memory(Decomposition((1, 2), 4, 16)) == 64 * 2 * 16


# -- the device table -----------------------------------------------------------------------------------------
def test_the_built_in_devices_and_the_classes_they_stand_for():
    assert devices.names() == [*devices.BUILT_IN, "lavapipe"]
    for name in devices.names():
        d = devices.built_in(name)
        assert d.units > 0 and d.lanes > 0 and d.clock_ghz > 0 and d.bandwidth_gbs > 0 and d.unit_ns > 0
        assert d.target in target.TARGETS
        assert d.peak_gflops == pytest.approx(2 * d.units * d.lanes * d.clock_ghz)
        assert Device.from_json(d.to_json()) == d
    assert {c: devices.for_target(c).name for c in target.TARGETS} == {
        "discrete": "h100", "integrated": "iris-xe", "cpu": "lavapipe"}
    assert devices.built_in(" H100 ") == H100
    with pytest.raises(ValueError, match="known: h100"):
        devices.built_in("tpu")
    assert devices.lavapipe(cores=3).units == 3


def test_a_bigger_gpu_predicts_a_large_dispatch_faster():
    big = cost(invocations=1 << 20, bytes_read=1 << 26, work=1e3)
    times = {n: latency.predict_ns(big, devices.built_in(n)) for n in ("h100", "rtx4090", "rtx3060", "iris-xe")}
    assert times["h100"] < times["rtx3060"] < times["iris-xe"]


def test_a_fit_replaces_only_the_fitted_parameters():
    fitted = latency.with_parameters(H100, {"unit_ns": 1.0, "dispatch_ns": 5.0}, "fitted on test", {"conv2d": 2.0})
    assert (fitted.unit_ns, fitted.dispatch_ns, fitted.efficiency, fitted.source) == (1.0, 5.0, {"conv2d": 2.0},
                                                                                       "fitted on test")
    assert (fitted.units, fitted.bandwidth_gbs) == (H100.units, H100.bandwidth_gbs)
    assert set(latency.FITTED) <= {f.name for f in dataclasses.fields(Device)}


def test_the_fit_file_sits_beside_the_tuning_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUENGINE_LATENCY_FIT", raising=False)
    monkeypatch.setenv("GPUENGINE_TUNE_CACHE", str(tmp_path / "tuned" / "cache.json"))
    assert devices.tuning_cache_path() == tmp_path / "tuned" / "cache.json"
    assert devices.fit_path() == tmp_path / "tuned" / "latency.json"
    assert devices.fit_path(tmp_path / "other.json") == tmp_path / "latency.json"
    monkeypatch.setenv("GPUENGINE_LATENCY_FIT", str(tmp_path / "fit.json"))
    assert devices.fit_path() == tmp_path / "fit.json"


# -- adapter classes and defaults -----------------------------------------------------------------------------
def test_adapter_classes_from_the_adapter_or_the_user(monkeypatch):
    monkeypatch.delenv("GPUENGINE_TARGET", raising=False)
    assert [target.classify({"adapter_type": t}) for t in ("DiscreteGPU", "CPU", "IntegratedGPU", "Unknown")] == [
        "discrete", "cpu", "integrated", "integrated"]
    detected = target.resolve(None, {"adapter_type": "CPU"}, {"subgroup"})
    assert (detected.name, detected.subgroups, detected.detected, detected.fill) == ("cpu", True, True, 64)
    chosen = target.resolve("Discrete", {"adapter_type": "CPU"}, set())
    assert (chosen.name, chosen.subgroups, chosen.detected) == ("discrete", False, False)
    with pytest.raises(ValueError, match="auto, discrete"):
        target.check("gpu")
    monkeypatch.setenv("GPUENGINE_TARGET", "integrated")
    assert target.check(None) == "integrated"


@pytest.mark.parametrize("grid", [(1, 1, 1), (3, 1, 1), (100, 100, 8), (7, 5, 3), (1000, 1, 1), (1, 1, 500)])
def test_default_workgroups_aim_at_64_invocations_without_idle_axes(grid):
    wg = default_workgroup(grid)
    assert math.prod(wg) <= 64 and wg[0] <= 16
    for size, extent in zip(wg, grid):
        assert size & (size - 1) == 0 and size < 2 * max(1, extent)  # a power of two not past the grid's cover
    assert default_workgroup((100, 100, 8), max_invocations=32) == (16, 2, 1)


# -- the policy on a synthetic kernel offer -------------------------------------------------------------------
def reduction(outputs: int, depth: int) -> Variants:
    """`outputs` dot products of `depth` terms, unsplit or split 8 ways (with or without subgroups)."""
    candidates = [Decomposition((1, 1), 1, 64), Decomposition((1, 1), 8, 8), Decomposition((1, 1), 8, 8, True)]

    def invocations(d: Decomposition) -> int:
        per = d.invocations_per_workgroup
        return -(-outputs * d.split // per) * per

    return Variants(problem=f"dot|{outputs}x{depth}", candidates=candidates, invocations=invocations,
                    active=lambda d: outputs * d.split, work=lambda d: depth / d.split + 2.0,
                    make=lambda d: None, macs=outputs * depth)


def test_few_deep_reductions_split_on_a_gpu_but_not_on_a_cpu():
    deep = reduction(outputs=64, depth=1 << 16)
    gpu = policy.choose(deep, target.named("discrete", subgroups=True))
    assert gpu.split == 8 and gpu.subgroup  # idle lanes: share each reduction, through subgroups where offered
    assert policy.choose(deep, target.named("discrete", subgroups=False)).subgroup is False
    assert policy.choose(deep, target.named("cpu")).split == 1  # lavapipe is full already: splitting only adds work


def test_many_shallow_reductions_stay_unsplit():
    assert policy.choose(reduction(outputs=1 << 22, depth=64), target.named("discrete")).split == 1


def test_ranked_candidates_are_ordered_by_predicted_time():
    deep, device = reduction(outputs=64, depth=1 << 16), devices.built_in("h100")
    ranked = policy.ranked(deep, target.named("discrete"), device)
    times = [policy.estimated_time(deep, d, target.named("discrete"), device) for d in ranked]
    assert times == sorted(times)


# -- the model applied to a lowered op (lowering/kernels/dispatch_cost.py: specs are built, nothing is compiled) --
def conv_graph(size: int):
    mb = ModelBuilder()
    x = mb.input("x", (1, size, size, 16))
    w = mb.const("w", np.ones((32, 3, 3, 16), np.float32))
    b = mb.const("b", np.zeros(32, np.float32))
    mb.output(mb.op("CONV_2D", [x, w, b], (1, size, size, 32), {"padding": 0, "stride_w": 1, "stride_h": 1}))
    g = mb.graph()
    return g.ops[0], g


def test_a_lowered_conv_is_predicted_slower_on_a_larger_map_and_on_a_cpu():
    lavapipe = devices.lavapipe(cores=2)
    h100, cpu = [], []
    for size in (8, 32, 128):
        op, g = conv_graph(size)
        (gpu_ns, dispatches), (cpu_ns, _) = op_ns(op, g, H100), op_ns(op, g, lavapipe)
        assert dispatches == 1 and gpu_ns > H100.dispatch_ns + H100.record_ns
        h100.append(gpu_ns)
        cpu.append(cpu_ns)
    assert h100 == sorted(h100) and cpu == sorted(cpu) and cpu[-1] > 100 * cpu[0]
    assert all(g < c for g, c in zip(h100, cpu))


# -- the tuned choices the runtime reads (lowering/kernels/tuned.py), as `gpuengine tune` writes them --
def test_the_runtime_reads_what_tuning_recorded_and_the_fit_beside_it(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUENGINE_LATENCY_FIT", raising=False)
    path = tmp_path / "tuning.json"
    written = TuningCache(path)
    split = Decomposition((2, 1), 4, 16, True)
    written.record("adapter-a", "Test GPU", "conv|problem", split, 100.0, 60.0)
    written.record("adapter-a", "Test GPU", "add|signature", (8, 4, 1), 10.0, 9.0)
    written.save()
    fitted = latency.with_parameters(H100, {"unit_ns": 1.0}, "fitted on test")
    devices.save_fit(devices.fit_path(path), "adapter-a", fitted, {"samples": 1})
    read = tuned.TuningCache(path).tuned("adapter-a")
    assert read.decompositions == {"conv|problem": split} and read.workgroups == {"add|signature": (8, 4, 1)}
    assert read.latency == fitted
    assert tuned.TuningCache(path).tuned("adapter-b") == tuned.Tuned()


def test_a_malformed_or_older_cache_is_read_as_empty(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text('{"format": 2, "devices": {"a": {"kernels": {"k": {"workgroup": [0, 1, 1]}, '
                    '"d": {"decomposition": {"tile": [1]}}, "x": 3}}}}')
    assert tuned.TuningCache(path).tuned("a") == tuned.Tuned()
    path.write_text('{"format": 1, "devices": {"a": {"kernels": {"k": {"workgroup": [8, 8, 1]}}}}}')
    assert tuned.TuningCache(path).tuned("a").workgroups == {}
    path.write_text("not json")
    assert tuned.TuningCache(path).data == {"format": tuned.FORMAT, "devices": {}}
