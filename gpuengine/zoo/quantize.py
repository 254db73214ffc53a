"""Full-integer post-training quantization of a float model, in numpy: how the zoo makes int8 models without
TensorFlow (TFLite's converter makes the same kind).

Weights are int8 per output channel (symmetric), biases int32 at scale input_scale * weight_scale, activations
int8 per tensor (asymmetric) with ranges from a calibration pass, the model's inputs and outputs int8 (or float
with QUANTIZE / DEQUANTIZE at the edges). The constraints LiteRT's int8 kernels impose are kept: SOFTMAX and
LOGISTIC write scale 1/256 and zero point -128, TANH 1/128 and 0; ops that only move values (pools, RESHAPE,
CONCATENATION, PAD, ...) share one set of parameters between their inputs and output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np

from ..model.ir import DTYPE_TO_TYPE, Graph, Model, Op, Quantization, Tensor

Ranges = dict[int, tuple[float, float]]

# Ops whose int8 kernels require fixed output parameters (TFLite's quantization spec): (scale, zero point).
FIXED_OUTPUT = {"SOFTMAX": (1.0 / 256, -128), "LOGISTIC": (1.0 / 256, -128), "TANH": (1.0 / 128, 0)}
# Ops that move values without arithmetic: their data input(s) and output share parameters.
SAME_PARAMETERS = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "MAX_POOL_2D", "AVERAGE_POOL_2D", "CONCATENATION",
                   "PAD", "PADV2", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "GATHER", "SPACE_TO_DEPTH",
                   "DEPTH_TO_SPACE", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SPLIT", "SPLIT_V",
                   "TILE", "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "MAXIMUM", "MINIMUM"}
# op -> (weights input, per-channel axis of the weights, bias input)
WEIGHTED = {"CONV_2D": (1, 0, 2), "DEPTHWISE_CONV_2D": (1, 3, 2), "FULLY_CONNECTED": (1, 0, 2)}


def calibration_ranges(graph: Graph, samples: Iterable[dict[int, np.ndarray]],
                       evaluate: Callable[[Graph, dict[int, np.ndarray]], dict[int, np.ndarray]] | None = None
                       ) -> Ranges:
    """min and max of every run-time float tensor over the samples; `evaluate(graph, feeds)` returns every
    tensor's value (default: the float64 reference executor, gpuengine/reference.py)."""
    if evaluate is None:
        from ..reference import run_reference

        def evaluate(graph: Graph, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
            return run_reference(graph, feeds, all_tensors=True)

    ranges: Ranges = {}
    for feeds in samples:
        for t, value in evaluate(graph, feeds).items():
            tensor = graph.tensors[t]
            if tensor.data is not None or tensor.dtype != np.float32 or np.size(value) == 0:
                continue
            lo, hi = float(np.min(value)), float(np.max(value))
            old = ranges.get(t, (lo, hi))
            ranges[t] = (min(lo, old[0]), max(hi, old[1]))
    return ranges


def activation_parameters(lo: float, hi: float) -> tuple[float, int]:
    """int8 scale and zero point of a range, widened to hold 0 exactly (TFLite's convention)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max((hi - lo) / 255.0, 1e-8)
    zero = int(np.clip(np.round(-128 - lo / scale), -128, 127))
    return float(np.float32(scale)), zero


def quantize_model(model: Model, ranges: Ranges, io: str = "int8") -> Model:
    """`model` with its main graph quantized to int8 (see the module docstring); `ranges` from
    calibration_ranges. io="int8": the graph's inputs and outputs become int8 tensors; io="float": they stay
    float32 and QUANTIZE / DEQUANTIZE ops convert at the edges."""
    if io not in ("int8", "float"):
        raise ValueError(f"io must be 'int8' or 'float', got {io!r}")
    graph = model.main.copy()
    params = _activation_parameters(graph, ranges)
    for t, (scale, zero) in params.items():
        _make_int8(graph.tensors[t], Quantization(np.array([scale], np.float32), np.array([zero], np.int64)))
    for op in graph.ops:
        _quantize_constants(graph, op, params)
    signatures = model.signatures
    if io == "float":
        moved = _float_edges(graph)
        signatures = [dataclasses.replace(s, inputs={k: moved.get(t, t) for k, t in s.inputs.items()},
                                          outputs={k: moved.get(t, t) for k, t in s.outputs.items()})
                      if s.subgraph == 0 else s for s in signatures]
    return dataclasses.replace(model, subgraphs=[graph, *model.subgraphs[1:]], signatures=signatures)


def _activation_parameters(graph: Graph, ranges: Ranges) -> dict[int, tuple[float, int]]:
    """(scale, zero point) for each run-time float tensor: tensors tied by SAME_PARAMETERS ops share the union of
    their ranges, or the fixed parameters one of them must have."""
    tensors = [t for t in ranges if graph.tensors[t].data is None and graph.tensors[t].dtype == np.float32]
    group = {t: t for t in tensors}

    def root(t: int) -> int:
        while group[t] != t:
            group[t] = group[group[t]]
            t = group[t]
        return t

    fixed: dict[int, tuple[float, int]] = {}
    for op in graph.ops:
        if op.code in SAME_PARAMETERS:
            data = [t for t in op.inputs if t in group] + [t for t in op.outputs if t in group]
            for t in data[1:]:
                group[root(t)] = root(data[0])
        if op.code in FIXED_OUTPUT and op.outputs[0] in group:
            fixed[op.outputs[0]] = FIXED_OUTPUT[op.code]
    union: dict[int, tuple[float, float]] = {}
    for t in tensors:
        r, (lo, hi) = root(t), ranges[t]
        old = union.get(r, (lo, hi))
        union[r] = (min(lo, old[0]), max(hi, old[1]))
    chosen = {root(t): p for t, p in fixed.items()}
    return {t: chosen.get(root(t)) or activation_parameters(*union[root(t)]) for t in tensors}


def _make_int8(tensor: Tensor, q: Quantization, data: np.ndarray | None = None, dtype: type = np.int8) -> None:
    tensor.dtype = np.dtype(dtype)
    tensor.type_code = DTYPE_TO_TYPE[tensor.dtype]
    tensor.quantization = q
    if data is not None:
        tensor.data = data


def _symmetric(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and per-channel scales along `axis` (zero point 0, range -127..127)."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    scale = np.maximum(np.abs(w).max(axis=other) / 127.0, 1e-12).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def _quantize_constants(graph: Graph, op: Op, params: dict[int, tuple[float, int]]) -> None:
    """Weights per channel, biases int32, other float constants an op reads per tensor."""
    if op.code in WEIGHTED and len(op.inputs) > 1 and op.inputs[0] in params:
        w_in, axis, b_in = WEIGHTED[op.code]
        weights = graph.tensors[op.inputs[w_in]]
        if weights.data is not None and weights.dtype == np.float32:
            w = np.asarray(weights.data, np.float32)
            q, scale = _symmetric(w, axis)
            _make_int8(weights, Quantization(scale, np.zeros(scale.size, np.int64), axis=axis), q)
            if b_in < len(op.inputs) and op.inputs[b_in] >= 0:
                bias = graph.tensors[op.inputs[b_in]]
                b_scale = (params[op.inputs[0]][0] * scale.astype(np.float64)).astype(np.float32)
                b_scale = np.broadcast_to(b_scale, (bias.shape[0],)).copy()
                b = np.round(np.asarray(bias.data, np.float64) / b_scale).astype(np.int32)
                _make_int8(bias, Quantization(b_scale, np.zeros(b_scale.size, np.int64), axis=0), b, np.int32)
        return
    for t in op.inputs:
        tensor = graph.tensors[t] if t >= 0 else None
        if tensor is None or tensor.data is None or tensor.dtype != np.float32 or tensor.quantization is not None:
            continue
        value = np.asarray(tensor.data, np.float32)
        scale, zero = activation_parameters(float(value.min()), float(value.max()))
        q = np.clip(np.round(value / scale) + zero, -128, 127).astype(np.int8)
        _make_int8(tensor, Quantization(np.array([scale], np.float32), np.array([zero], np.int64)), q)


def _float_edges(graph: Graph) -> dict[int, int]:
    """Float inputs and outputs, converted by QUANTIZE after each input and DEQUANTIZE before each output;
    returns {old input/output tensor: its float replacement}."""
    moved: dict[int, int] = {}
    def float_twin(t: int, suffix: str) -> int:
        twin = dataclasses.replace(graph.tensors[t], index=len(graph.tensors), name=graph.tensors[t].name + suffix,
                                   dtype=np.dtype(np.float32), type_code=0, quantization=None)
        graph.tensors.append(twin)
        return twin.index

    for position, t in enumerate(list(graph.inputs)):
        if graph.tensors[t].quantization is None:
            continue
        f = float_twin(t, "/float")
        graph.ops.insert(0, Op(index=0, code="QUANTIZE", inputs=[f], outputs=[t], builtin_code=114))
        graph.inputs[position] = moved[t] = f
    for position, t in enumerate(list(graph.outputs)):
        if graph.tensors[t].quantization is None:
            continue
        f = float_twin(t, "/float")
        graph.ops.append(Op(index=0, code="DEQUANTIZE", inputs=[t], outputs=[f], builtin_code=6))
        graph.outputs[position] = moved[t] = f
    for i, op in enumerate(graph.ops):
        op.index = i
    return moved


CALIBRATION_SAMPLES = 8


def quantized_zoo_model(float_model: bytes, seed: int, description: str, io: str = "int8") -> bytes:
    """A zoo model quantized by quantize_model, activation ranges calibrated on CALIBRATION_SAMPLES seeded inputs
    uniform in [-1, 1] (the range the zoo's float models are fed)."""
    from ..model.builder import write_model
    from ..model.reader import read_model

    model = read_model(float_model)
    rng = np.random.default_rng(1_000_003 * (seed + 1))
    graph = model.main
    samples = [{t: rng.uniform(-1.0, 1.0, graph.tensors[t].shape).astype(np.float32) for t in graph.inputs}
               for _ in range(CALIBRATION_SAMPLES)]
    quantized = quantize_model(model, calibration_ranges(graph, samples), io=io)
    quantized.description = description
    return write_model(quantized)


def mobilenet_v2_int8(seed: int = 0) -> bytes:
    """The zoo's MobileNet v2 (same seed, same weights) quantized to int8: int8 input and output, per-channel
    int8 weights, int32 biases, softmax output at scale 1/256."""
    from .mobilenet import mobilenet_v2

    return quantized_zoo_model(mobilenet_v2(seed), seed,
                               f"gpuengine.zoo mobilenet_v2_int8 (random weights, seed={seed}, full-integer "
                               f"post-training quantization, {CALIBRATION_SAMPLES} calibration inputs)")


def vit_tiny_int8(seed: int = 0) -> bytes:
    """The zoo's ViT-tiny (same seed, same weights) with every LayerNorm in Keras' form (MEAN, SQUARED_DIFFERENCE,
    RSQRT, ...: the form TensorFlow's converter quantizes; LiteRT has no int8 SQUARE, SQRT or DIV) quantized to
    int8: int8 FULLY_CONNECTED, BATCH_MATMUL, MEAN, SQUARED_DIFFERENCE, RSQRT, GELU, SOFTMAX, MUL, ADD, SUB; int8
    input and output."""
    from .vit import vit_tiny

    return quantized_zoo_model(vit_tiny(seed, ("keras",)), seed,
                               f"gpuengine.zoo vit_tiny_int8 (random weights, seed={seed}, full-integer "
                               f"post-training quantization, {CALIBRATION_SAMPLES} calibration inputs)")
