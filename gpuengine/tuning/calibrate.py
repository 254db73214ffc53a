"""Fitting a device description (latency/latency.py) to the device in hand: probe kernels and models are timed
dispatch by dispatch, and the free parameters (latency.FITTED) are fitted to minimize the relative error.

Each sample is one dispatch in one decomposition, timed as `tune` times it (runtime/timing.py `span`: the
dispatch recorded back to back in one pass, after a warm-up, median of runs), so it includes the dependent
dispatch's barrier the model's `dispatch_ns` stands for. The probes are a small net of 1x1, 3x3, depthwise and
fully connected layers of several shapes, each decomposable dispatch in its default and a few other
decompositions (splits, small and large tiles): the spread the fit needs to separate latency from throughput.

The fit is scipy.optimize.least_squares on log(predicted / measured) over the log of each parameter (they stay
positive); `holdout` fits on some dispatches and reports the error on the others.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..latency.latency import FITTED, Device, DispatchCost, candidate_cost, predict_ns, with_parameters
from ..lowering.kernels.dispatch_cost import dispatch_cost


@dataclass
class Sample:
    cost: DispatchCost
    measured_ns: float
    group: str  # the dispatch (one model's dispatch index) this decomposition belongs to
    default: bool  # the decomposition the program chose


def probe_model(scale: int = 1) -> bytes:
    """Probe kernels: convolutions, a depthwise conv, a mean and a softmax of several shapes (`scale`
    multiplies the spatial size); gather_probe_model has the gathers."""
    from ..zoo.mobilenet import Net

    net = Net(7, "latency probes")
    x = net.input("x", (1, 8 * scale, 8 * scale, 24))
    a = net.conv(x, 48, 1, 1, "RELU6", name="expand")
    b = net.dwconv(a, 3, 1, "RELU6", name="dw")
    c = net.conv(b, 96, 3, 2, "RELU", name="k3s2")
    d = net.conv(c, 256, 1, 1, "NONE", name="wide")
    e = net.conv(d, 16, 1, 1, "NONE", name="deep")
    return net.build(net.softmax(net.global_avg_pool(e)))


def gather_probe_model(rows: int = 8192, width: int = 576, seed: int = 0) -> bytes:
    """Probe gathers, which read a few rows of a large table (the model counts the rows, not the table: an
    embedding lookup of one token): EMBEDDING_LOOKUP of one id from an int8 table with row scales (SmolLM's
    embedding at `width`) and from an f32 table of up to 8,192 x 256, and a GATHER of two rows with run-time indices
    from up to 4,096 x 128."""
    from ..model.builder import ModelBuilder
    from ..model.ir import Quantization

    rng = np.random.default_rng(seed)
    mb = ModelBuilder("gather probes")
    one = mb.input("id", (1,), np.int32)
    two = mb.input("ids", (2,), np.int32)
    table = rng.random((rows, width), dtype=np.float32) - 0.5
    scale = (np.abs(table).max(axis=1) / 127.0).astype(np.float32)
    q = np.round(table / scale[:, None]).astype(np.int8)
    int8_table = mb.const("int8_table", q, np.int8, Quantization(scale, np.zeros(rows, np.int64), axis=0))
    f32_table = mb.const("f32_table", table[:8192, :256])
    params = mb.const("params", table[:4096, :128])
    mb.output(mb.op("EMBEDDING_LOOKUP", [one, int8_table], (1, width)),
              mb.op("EMBEDDING_LOOKUP", [one, f32_table], (1, min(width, 256))),
              mb.op("GATHER", [params, two], (2, min(width, 128)), {"axis": 0}))
    return mb.build()


def measure_program(it: Any, name: str, runs: int = 5, alternatives: int = 3, target_pass_ns: float = 2e6,
                    max_repeat: int = 64, clock: Callable[[], float] | None = None,
                    deadline: float | None = None) -> list[Sample]:
    """Samples of every dispatch of an allocated Interpreter's GPU programs, and of up to `alternatives` other
    decompositions of each decomposable one (chosen to spread: the fewest and most invocations, between).

    Each sample is the fastest of `runs` timed passes, taken in rounds over all samples: on a shared machine
    other work only ever adds time, so the minimum is the stable figure, and rounds spread each sample's passes
    over the whole measurement, so a burst of load cannot land on all of one sample's passes."""
    import time

    from ..runtime.timing import DispatchTimer

    clock = clock or time.monotonic
    entries: list[tuple[Any, DispatchCost, Any, int, str, bool]] = []  # timer, cost, dispatch, repeat, group, default
    for p, prog in enumerate(it.compiled.gpu_programs):
        timer = DispatchTimer(prog)
        timer.warm_up(0.1)
        for i, disp in enumerate(prog.dispatches):
            spec = disp.spec
            base = dispatch_cost(spec, prog.graph, prog.precision)
            hot = prog.hot_dispatches[i]
            single = timer.span(runs=1, dispatches=[hot], warmup_s=0)
            repeat = int(min(max_repeat, max(1, target_pass_ns // max(1.0, single))))
            group = f"{name}#{p}.{i}"
            entries.append((timer, base, hot, repeat, group, True))
            if spec.variants is None or not prog.tunable[i] or alternatives <= 0:
                continue
            for d in spread(spec.variants, spec.decomposition, prog.target.subgroups, alternatives):
                try:
                    variant = prog.variant(i, decomposition=d)
                except Exception:  # noqa: BLE001 - a decomposition this device cannot run is no sample
                    continue
                entries.append((timer, candidate_cost(spec.variants, d, base), variant, repeat, group, False))
    best = [math.inf] * len(entries)
    for _ in range(max(1, runs)):
        if deadline is not None and clock() > deadline and all(math.isfinite(b) for b in best):
            break
        for k, (timer, _, dispatch, repeat, _, _) in enumerate(entries):
            best[k] = min(best[k], timer.span(runs=1, dispatches=[dispatch], repeat=repeat, warmup_s=0))
    return [Sample(cost, ns, group, default) for (_, cost, _, _, group, default), ns in zip(entries, best)]


def spread(variants: Any, default: Any, subgroups: bool, count: int) -> list[Any]:
    """Up to `count` decompositions other than the default, spread over invocations launched (fewest, most,
    between), runnable with WebGPU's default limits."""
    from .search import decomposition_space

    options, _ = decomposition_space(variants, default, subgroups)
    others = sorted((d for d in options if d != default), key=lambda d: variants.invocations(d))
    if len(others) <= count:
        return others
    picks = {round(k * (len(others) - 1) / (count - 1)) for k in range(count)} if count > 1 else {0}
    return [others[k] for k in sorted(picks)]


MIN_KERNEL_SAMPLES = 4  # a template gets its own efficiency from this many samples on
PRIOR_WEIGHT = 0.5  # pulls each efficiency toward 1 (the generic cost units) where the data say little


def fit(samples: Sequence[Sample], base: Device, names: Sequence[str] = FITTED, source: str = "") -> Device:
    """`base` with the parameters `names`, and an efficiency per template with enough samples, fitted to the
    samples (robust least squares on the log of predicted / measured, over the log of each parameter)."""
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise RuntimeError("fitting the latency model needs scipy: pip install gpuengine[calibrate]") from None

    costs = [s.cost for s in samples]
    measured = np.array([max(1.0, s.measured_ns) for s in samples])
    counts: dict[str, int] = {}
    for c in costs:
        counts[c.kernel] = counts.get(c.kernel, 0) + 1
    kernels = sorted(k for k, n in counts.items() if n >= MIN_KERNEL_SAMPLES and k)
    start = np.concatenate([np.log([getattr(base, n) for n in names]),
                            np.log([base.efficiency.get(k, 1.0) for k in kernels])])

    def device_of(x: np.ndarray) -> Device:
        values = dict(zip(names, np.exp(x[:len(names)])))
        efficiency = {**base.efficiency, **dict(zip(kernels, np.exp(x[len(names):]).tolist()))}
        return with_parameters(base, values, base.source, efficiency)

    def residuals(x: np.ndarray) -> np.ndarray:
        device = device_of(x)
        predicted = np.array([predict_ns(c, device) for c in costs])
        return np.concatenate([np.log(predicted / measured), PRIOR_WEIGHT * x[len(names):]])

    result = least_squares(residuals, start, method="trf", loss="soft_l1", f_scale=0.2)
    return dataclasses.replace(device_of(result.x), source=source or f"fitted on {len(samples)} dispatches")


def relative_errors(samples: Sequence[Sample], device: Device) -> np.ndarray:
    return np.array([abs(predict_ns(s.cost, device) - s.measured_ns) / s.measured_ns for s in samples])


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    if len(a) < 2:
        return 1.0
    value = spearmanr(a, b).statistic
    # rounded: over a few decompositions it is a simple fraction (0.8 for one swap in 4), not 0.7999999999999999
    return 1.0 if math.isnan(value) else round(float(value), 9)


def order_agreement(samples: Sequence[Sample], device: Device, min_candidates: int = 3) -> dict[str, float]:
    """Spearman correlation between predicted and measured times of each dispatch's decompositions."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    return {g: spearman([predict_ns(s.cost, device) for s in group], [s.measured_ns for s in group])
            for g, group in groups.items() if len(group) >= min_candidates}


@dataclass
class Holdout:
    device: Device
    fitted_on: int
    held_out: int
    median_error: float  # median |predicted - measured| / measured on the held-out dispatches
    spearman: dict[str, float]  # per held-out decomposed dispatch

    def to_json(self) -> dict[str, Any]:
        return {"fitted_on": self.fitted_on, "held_out": self.held_out, "median_error": self.median_error,
                "spearman": self.spearman}


def holdout(samples: Sequence[Sample], base: Device, every: int = 3, offset: int = 0) -> Holdout:
    """Fit on the dispatches not held out (every `every`-th dispatch, all its decompositions, is held out) and
    measure the error on the held-out ones."""
    groups = sorted({s.group for s in samples}, key=lambda g: [s.group for s in samples].index(g))
    held = {g for k, g in enumerate(groups) if k % every == offset % every}
    train = [s for s in samples if s.group not in held]
    test = [s for s in samples if s.group in held]
    device = fit(train, base)
    return Holdout(device, len(train), len(test), float(np.median(relative_errors(test, device))),
                   order_agreement(test, device))


def cross_validate(samples: Sequence[Sample], base: Device, folds: int = 3,
                   min_spread: float = 1.5) -> tuple[np.ndarray, dict[str, float]]:
    """Every dispatch held out once: fit on the other folds, predict its decompositions. Returns the held-out
    relative errors (all samples) and the Spearman correlation of each decomposed dispatch whose decompositions'
    measured times differ by at least `min_spread` (orders within noise are not orders)."""
    groups = list(dict.fromkeys(s.group for s in samples))
    errors: list[float] = []
    order: dict[str, float] = {}
    for k in range(folds):
        held = {g for i, g in enumerate(groups) if i % folds == k}
        device = fit([s for s in samples if s.group not in held], base)
        test = [s for s in samples if s.group in held]
        errors += list(relative_errors(test, device))
        for g, rho in order_agreement(test, device).items():
            times = [s.measured_ns for s in test if s.group == g]
            if max(times) >= min_spread * min(times):
                order[g] = rho
    return np.array(errors), order


def report(samples: Sequence[Sample], device: Device) -> dict[str, Any]:
    errors = relative_errors(samples, device)
    order = order_agreement(samples, device)
    return {"samples": len(samples), "median_error": float(np.median(errors)) if len(errors) else None,
            "spearman_min": min(order.values()) if order else None,
            "spearman_median": float(np.median(list(order.values()))) if order else None}
