"""LASNet-style masked blocks on the adapter in hand, measured (as `gpuengine tune` chooses decompositions and
`gpuengine calibrate` fits the latency model):

* measure_block / BlockTimes: the execution chosen by measurement. Per execution patch size S, the block's time with
  no patch and with every patch active (runtime/sparse_block.SparseBlockRunner modes "none" and "all"), linear in
  between; the engine's own dense kernels for the block timed in the same rounds. The choice at an expected
  activation rate r: the fastest S at the expected active patches (latency/sparse.expected_active), or dense when
  that is no faster.
* calibration_samples / fit: the latency model's view of the sparse kernels, fitted. Each sparse kernel (the mask
  kernel, the block kernel) timed alone at each S on inputs of several activation rates, priced at the active
  patches the GPU listed (latency/sparse.block_costs), beside the block's dense dispatches in several
  decompositions (tuning/calibrate.measure_program); `fit` gives each template its efficiency
  (tuning/calibrate.fit, the device's other parameters kept), so the model prices dense and sparse execution of
  the block from the same kind of measurement, and latency/sparse.choose_execution follows it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..latency.latency import Device
from ..latency.sparse import block_costs, expected_active
from ..lowering.kernels import lasnet
from ..passes.lasnet_blocks import MaskedBlock
from ..runtime.sparse_block import SparseBlockRunner
from .calibrate import Sample
from .calibrate import fit as fit_device

__all__ = ["BlockTimes", "CALIBRATION_SHAPES", "block_input", "block_model", "calibrate", "calibration_samples", "fit",
           "measure_block", "supported_patches"]

CALIBRATION_RATES = (0.0, 0.15, 0.3, 0.6, 1.0)
CALIBRATION_SHAPES = ((32, 32, 16), (64, 64, 16), (32, 32, 32))  # blocks (H, W, C) the fit times
FITTED_TEMPLATES = ("conv2d", "lasnet_block", "lasnet_mask")  # what the dense / sparse choice of a block hinges on


def supported_patches(block: MaskedBlock, patches: Sequence[int] = lasnet.PATCHES) -> tuple[int, ...]:
    """The execution patch sizes the kernels can run `block` at (lowering/kernels/lasnet.supports)."""
    return tuple(p for p in patches if lasnet.supports(block, p) is None)


@dataclass
class BlockTimes:
    """Measured milliseconds of one block on one adapter: dense (the engine's kernels), and per S the block with
    no patch and with every patch active."""

    block: MaskedBlock
    dense_ms: float
    none_ms: dict[int, float] = field(default_factory=dict)
    all_ms: dict[int, float] = field(default_factory=dict)

    def sparse_ms(self, patch: int, rate: float) -> float:
        """The block at S = `patch` when cells are active at `rate`: linear in the expected active patches."""
        h, w, _ = self.block.shape
        total = math.ceil(h / patch) * math.ceil(w / patch)
        share = expected_active(h, w, self.block.cell, patch, rate) / total
        return self.none_ms[patch] + share * (self.all_ms[patch] - self.none_ms[patch])

    def choose(self, rate: float) -> tuple[str, int, dict[str, float]]:
        """("sparse", S) or ("dense", 0), with every option's estimate in ms (a tie goes to dense)."""
        options = {f"sparse {p}": self.sparse_ms(p, rate) for p in self.none_ms}
        options["dense"] = self.dense_ms
        best = min(options, key=lambda k: (options[k], k != "dense"))
        return ("dense", 0, options) if best == "dense" else ("sparse", int(best.split()[1]), options)


def measure_block(gpu: Any, block: MaskedBlock, dense: float | Callable[[], float],
                  patches: Sequence[int] | None = None, runs: int = 9) -> BlockTimes:
    """Time the block's sparse execution at each S with no patch and with every patch active (the least of `runs`
    rounds each: what load disturbs least). `dense`: the engine's dense kernels for the block in ms, or a function
    timing one pass of them, then called in the same rounds (a burst of load hits every option alike)."""
    patches = supported_patches(block, patches if patches is not None else lasnet.PATCHES)
    times = BlockTimes(block, dense if not callable(dense) else math.inf)
    h, w, c = block.shape
    zeros = np.zeros((1, h, w, c), np.float32)  # the input does not matter: the mode decides what runs
    runners = {(patch, mode): SparseBlockRunner(gpu, block, patch, mode)
               for patch in patches for mode in ("none", "all")}
    for runner in runners.values():
        runner.run(zeros)
    for _ in range(max(1, runs)):
        if callable(dense):
            times.dense_ms = min(times.dense_ms, dense())
        for (patch, mode), runner in runners.items():
            into = times.none_ms if mode == "none" else times.all_ms
            into[patch] = min(into.get(patch, math.inf), runner.time_ms(runs=1))
    return times


def block_input(block: MaskedBlock, rate: float, seed: int = 0) -> np.ndarray:
    """An input x [1, H, W, C] of `block` whose masker cells are active with probability `rate`: each cell's pixels
    offset along the masker's weights, up where the cell is to be active, down elsewhere."""
    h, w, c = block.shape
    rng = np.random.default_rng(seed)
    cells = rng.random((h // block.cell, w // block.cell)) < rate
    norm = max(float(np.linalg.norm(block.masker_weights)), 1e-12)
    # logit = threshold + 1 where the cell is to be active, threshold - 1 elsewhere (plus the noise's small share)
    logit = block.threshold - block.masker_bias + np.where(cells, 1.0, -1.0).repeat(block.cell, 0).repeat(block.cell, 1)
    x = (logit / norm)[None, :, :, None] * (block.masker_weights / norm) + rng.uniform(-0.05, 0.05, (1, h, w, c))
    return x.astype(np.float32)


def block_model(h: int, w: int, c: int, cell: int = 4, seed: int = 34) -> bytes:
    """A LASNet-style masked block as Keras converts it (scripts/dev/make_lasnet_model.py: the masker averages the
    cell's pixels and channels, threshold 0; conv1 with ReLU), with random weights of the same scale: a .tflite."""
    from ..model.builder import ModelBuilder

    rng = np.random.default_rng(seed)
    same, valid = 0, 1
    mb = ModelBuilder()
    x = mb.input("x", (1, h, w, c))
    pooled = mb.op("AVERAGE_POOL_2D", [x], (1, h // cell, w // cell, c), {
        "padding": valid, "stride_w": cell, "stride_h": cell, "filter_width": cell, "filter_height": cell})
    logit = mb.op("CONV_2D", [pooled, mb.const("mw", np.full((1, 1, 1, c), 1.0 / c, np.float32)),
                              mb.const("mb", np.zeros(1, np.float32))], (1, h // cell, w // cell, 1),
                  {"padding": valid, "stride_w": 1, "stride_h": 1})
    flag = mb.op("GREATER", [logit, mb.const("thr", np.array(0.0, np.float32))], (1, h // cell, w // cell, 1),
                 dtype=np.bool_)
    mask = mb.op("RESIZE_NEAREST_NEIGHBOR", [mb.op("CAST", [flag], (1, h // cell, w // cell, 1)),
                                             mb.const("size", np.array([h, w], np.int32))], (1, h, w, 1),
                 {"align_corners": False, "half_pixel_centers": True})
    scale = 0.5 * np.sqrt(6.0 / (18 * c))  # half of Glorot's uniform bound, as the Keras fixture

    def conv(src: int, relu: bool, name: str) -> int:
        weights = mb.const(f"{name}_w", rng.uniform(-scale, scale, (c, 3, 3, c)).astype(np.float32))
        return mb.op("CONV_2D", [src, weights, mb.const(f"{name}_b", np.zeros(c, np.float32))], (1, h, w, c),
                     {"padding": same, "stride_w": 1, "stride_h": 1, "fused_activation_function": int(relu)})

    branch = conv(conv(x, True, "conv1"), False, "conv2")
    mb.output(mb.op("ADD", [x, mb.op("MUL", [branch, mask], (1, h, w, c))], (1, h, w, c)))
    return mb.build()


def calibration_samples(gpu: Any, block: MaskedBlock, patches: Sequence[int] | None = None, runs: int = 5,
                        rates: Sequence[float] = CALIBRATION_RATES, target_pass_ns: float = 2e6,
                        name: str = "lasnet", pixels: Sequence[int] = (lasnet.MOST_PIXELS,)) -> list[Sample]:
    """Samples of the block's sparse kernels: at each S and each rate, the mask and args kernels and (with any patch
    active) the block kernel in each decomposition of `pixels`, timed alone (repeated in one pass up to about
    `target_pass_ns`, as calibrate.measure_program does; the least of `runs` passes taken in rounds), priced at the
    active patches the GPU listed. By default the wide decomposition only, the one a CPU adapter runs: on lavapipe
    the thin one measured 3-5x slower than the wide (the model says 2.2x), and a fit over both moved the wide one's
    predictions off by a third (median error 25 % against 12 %)."""
    h, w, c = block.shape
    entries: list[tuple[SparseBlockRunner, str, Any, str, int]] = []
    for patch in supported_patches(block, patches if patches is not None else lasnet.PATCHES):
        for n, decomposition in enumerate(pixels):
            for k, rate in enumerate(rates):
                runner = SparseBlockRunner(gpu, block, patch, pixels=decomposition)
                runner.run(block_input(block, rate, seed=k))
                costs = block_costs(h, w, c, block.cell, patch, runner.active, decomposition)
                for kernel, cost in zip(lasnet.KERNELS, costs):
                    if kernel != "block" and n:
                        continue  # the mask and args kernels do not depend on it
                    repeat = int(min(8, max(1, target_pass_ns // max(1.0, runner.span_ns(kernel)))))
                    entries.append((runner, kernel, cost,
                                    f"{name} S={patch} pixels={decomposition} rate={rate} {kernel}", repeat))
    best = [math.inf] * len(entries)
    for _ in range(max(1, runs)):
        for i, (runner, kernel, _, _, repeat) in enumerate(entries):
            best[i] = min(best[i], runner.span_ns(kernel, repeat))
    return [Sample(cost, ns, group, True) for (_, _, cost, group, _), ns in zip(entries, best)]


def calibrate(base: Device, shapes: Sequence[tuple[int, int, int]] = CALIBRATION_SHAPES, runs: int = 5,
              turns: int = 3) -> tuple[Device, list[Sample]]:
    """Fit the templates a block's dense / sparse choice prices (FITTED_TEMPLATES) on this adapter: per block shape
    (block_model), its dense dispatches as the engine runs them (tuning/calibrate.measure_program) and its sparse
    kernels (calibration_samples), measured in `turns` turns (each sample the least over them, so load that comes
    and goes hits dense and sparse alike); `base` with the fitted efficiencies, and the samples."""
    import dataclasses

    from ..api.interpreter import Interpreter
    from ..model.reader import read_model
    from ..passes.lasnet_blocks import find_masked_blocks
    from .calibrate import measure_program

    programs = []
    for h, w, c in shapes:
        data = block_model(h, w, c)
        it = Interpreter(model_content=data, workgroup_cache="/nonexistent/none.json", target=base.target)
        it.allocate_tensors()
        (block,) = find_masked_blocks(read_model(data).subgraphs[0])
        programs.append((f"{h}x{w}x{c}", it, block))
    samples: list[Sample] = []
    for _ in range(max(1, turns)):
        got = []
        for name, it, block in programs:
            got += measure_program(it, f"{name} dense", runs=runs, alternatives=0)
            got += calibration_samples(it.compiled.gpu_programs[0].gpu, block, runs=runs, name=name)
        samples = got if not samples else [dataclasses.replace(s, measured_ns=min(s.measured_ns, g.measured_ns))
                                           for s, g in zip(samples, got)]
    fitted = fit(samples, dataclasses.replace(base, efficiency={}))
    kept = {k: v for k, v in fitted.efficiency.items() if k in FITTED_TEMPLATES}
    return dataclasses.replace(base, efficiency={**base.efficiency, **kept}), samples


def fit(samples: Sequence[Sample], base: Device, source: str = "") -> Device:
    """`base` with an efficiency per template fitted to `samples` (its other parameters kept)."""
    return fit_device(samples, base, names=(), source=source or base.source)
