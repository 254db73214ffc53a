"""LiteRT as the oracle: run a model on LiteRT's CPU runtime, seed inputs, and measure how far two outputs differ.

Used by the command line (`run`, `bench`, `tune`) and by the tests. The rule everywhere: relative difference =
max |got - ref| / max(1, max |ref|), per output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .litert_logging import without_litert_info
from .model.ir import Graph
from .model.reader import read_model


def integer_input_bounds(graph: Graph, draw: int = 4) -> dict[int, int]:
    """{graph input: `draw`, or less where the input's values are the ids of a GATHER / EMBEDDING_LOOKUP /
    GATHER_ND whose indexed axis is shorter} for the inputs that index something (runtime/bounds.py's cones)."""
    from .runtime.bounds import IndexChecks

    bounds: dict[int, int] = {}
    for check in IndexChecks(graph).checks:
        for t in check.sources:
            bounds[t] = max(1, min(bounds.get(t, draw), *check.bounds))
    return bounds


def random_inputs(model: bytes, seed: int = 0, low: float = -1.0, high: float = 1.0) -> dict[int, np.ndarray]:
    """Seeded inputs for every model input: uniform in [low, high) for floats and for quantized integers (whose
    real values are drawn, then quantized to the input's grid), 0..3 for other integers (below the smallest axis
    they index where they are the ids of a GATHER / EMBEDDING_LOOKUP / GATHER_ND: a 2-row segment table)."""
    graph = read_model(model).main
    rng = np.random.default_rng(seed)
    id_bound = integer_input_bounds(graph)
    feeds = {}
    for t in graph.inputs:
        tensor = graph.tensors[t]
        q = tensor.quantization
        if np.issubdtype(tensor.dtype, np.floating):
            feeds[t] = rng.uniform(low, high, tensor.shape).astype(tensor.dtype)
        elif q is not None and q.scale.size == 1 and np.issubdtype(tensor.dtype, np.integer):
            info = np.iinfo(tensor.dtype)
            zero = int(q.zero_point[0]) if q.zero_point.size else 0
            real = rng.uniform(low, high, tensor.shape) / float(q.scale[0])
            feeds[t] = np.clip(np.round(real) + zero, info.min, info.max).astype(tensor.dtype)
        else:
            feeds[t] = rng.integers(0, id_bound.get(t, 4), tensor.shape).astype(tensor.dtype)
    return feeds


def litert_interpreter(model: bytes, builtin: bool = False, **options: Any) -> Any:
    """LiteRT's (CPU) Interpreter over `model`, allocated; ImportError without ai-edge-litert. builtin: its builtin
    without the default XNNPACK delegate (the integer kernels whose rounding the int8 path reproduces; XNNPACK
    requantizes some int8 ops, CONV_2D among them, differently, and LiteRT 2.3's XNNPACK departs on decoders whose
    heads x head dim differs from the width). `options`: further Interpreter arguments."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    if builtin:
        options["experimental_op_resolver_type"] = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    with without_litert_info():  # its delegate is created (and says so) on the first allocation
        interpreter = Interpreter(model_content=model, **options)
        interpreter.allocate_tensors()
    return interpreter


def run_litert(model: bytes, feeds: dict[int, np.ndarray], builtin: bool = False) -> dict[int, np.ndarray]:
    """Every output of one LiteRT (CPU) invoke (builtin: see litert_interpreter)."""
    it = litert_interpreter(model, builtin)
    for t, v in feeds.items():
        it.set_tensor(t, v)
    it.invoke()
    return {d["index"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def range_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| relative to ref's range (max - min), for logits: their spread is what decides, so a constant
    offset counts as an error."""
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / max(float(np.ptp(ref)), 1e-30))


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max(1, max |ref|); inf when shapes differ or NaN appears only on one side."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    if not np.array_equal(np.isnan(got), np.isnan(ref)):
        return float("inf")
    mask = ~np.isnan(ref)
    if not mask.any():
        return 0.0
    with np.errstate(invalid="ignore"):  # inf - inf: equal infinities are handled just below
        diff = np.abs(got[mask] - ref[mask])
    diff[np.isinf(got[mask]) & (got[mask] == ref[mask])] = 0.0
    scale = max(1.0, float(np.max(np.abs(ref[mask][np.isfinite(ref[mask])]), initial=0.0)))
    return float(np.max(diff, initial=0.0) / scale)
