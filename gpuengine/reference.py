"""A float64 reference executor of the IR: a second oracle that gives the exact result of a model, so an engine's
error is measured against it instead of against another float32 engine (LiteRT's kernels round too).

    from gpuengine.reference import run_reference
    exact = run_reference(model_bytes, {input_index: x})      # {output tensor index: float64 array}

Every op is evaluated in numpy float64 from its TFLite (or MediaPipe) definition, one function per op code in
BUILTIN_OPS / CUSTOM_OPS (each defined in its op family's module, model/families/<family>.py): the ops gpuengine
runs on the GPU (`gpuengine ops`), MediaPipe's custom ops, and the load-time ones models carry (DENSIFY, SHAPE,
CAST, QUANTIZE, DEQUANTIZE). Quantized tensors hold real numbers here: constants and fed int8/uint8 inputs are
dequantized, QUANTIZE and DEQUANTIZE are the identity, so an int8 engine is measured against the real-valued model
it approximates (rounding to the grids included in its error). Integer tensors (shapes, indices) stay integers.
Index choices that TFLite defines by float32 arithmetic (nearest-neighbour and bilinear resize source coordinates)
are computed as TFLite computes them; the values sampled are then combined in float64. LiteRT's float kernels ignore
a fused TANH or SIGN_BIT activation, and so does this executor. The graph runs as read: no passes, no fusion.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from .model import quantization
from .model.densify import densify
from .model.families import merged
from .model.families._common import F64, Fn, Node
from .model.ir import Graph, Model, Tensor
from .model.quantization import INT4, unpack_int4
from .model.reader import read_model
from .model.validate import validate_model


# -- values --------------------------------------------------------------------------------------------------------
def is_real(t: Tensor) -> bool:
    """A tensor whose values are real numbers here: floats, and integers carrying quantization parameters."""
    if np.issubdtype(t.dtype, np.floating):
        return True
    q = t.quantization
    return q is not None and (q.scale.size > 0 or q.blockwise) and np.issubdtype(t.dtype, np.integer)


def dequantize(t: Tensor, data: np.ndarray) -> np.ndarray:
    """Stored values of tensor t (int8/uint8/int16/int32 with scale and zero point, or floats) as float64."""
    return quantization.dequantize(t, data, F64)


def _constant(t: Tensor) -> np.ndarray:
    data = unpack_int4(t) if t.type_code == INT4 else densify(t, t.shape) if t.sparsity is not None else t.data
    data = np.asarray(data).reshape(t.shape)
    return dequantize(t, data) if is_real(t) else data.astype(np.int64) if data.dtype.kind in "iu" else data


def _as_declared(t: Tensor, value: Any) -> np.ndarray:
    """An op's result as this executor holds tensor t: float64 for real tensors, int64 or bool otherwise, in t's
    declared shape when the element counts agree (RESHAPE-like results)."""
    value = np.asarray(value)
    if is_real(t):
        value = value.astype(F64)
    elif t.dtype == np.bool_:
        value = value.astype(np.bool_)
    elif np.issubdtype(t.dtype, np.integer):
        value = value.astype(np.int64)
    if value.shape != tuple(t.shape) and value.size == t.size and all(d >= 0 for d in t.shape):
        value = value.reshape(t.shape)
    return value


BUILTIN_OPS: dict[str, Fn] = merged("BUILTIN_OPS")  # each op's reference, from its family module
CUSTOM_OPS: dict[str, Fn] = merged("CUSTOM_OPS")


# -- running a graph -----------------------------------------------------------------------------------------------
def reference_ops() -> list[str]:
    """The op codes this executor evaluates (builtins and custom ops)."""
    return sorted(set(BUILTIN_OPS) | set(CUSTOM_OPS))


def _graph(model: bytes | str | os.PathLike | Model | Graph) -> Graph:
    if isinstance(model, Graph):
        return model
    if not isinstance(model, Model):
        model = read_model(model)
        validate_model(model)
    return model.main


def feed_value(t: Tensor, value: Any) -> np.ndarray:
    """A value fed for input t, as the executor holds it (quantized inputs dequantized)."""
    value = np.asarray(value)
    if tuple(value.shape) != tuple(t.shape):
        raise ValueError(f"input {t.index} ({t.name!r}) has shape {t.shape}, fed {value.shape}")
    return _as_declared(t, dequantize(t, value) if is_real(t) else value)


def run_reference(model: bytes | str | os.PathLike | Model | Graph,
                  feeds: Mapping[int, Any] | Sequence[Any], *, all_tensors: bool = False,
                  round_to: Any = None, round_only: Collection[int] | None = None,
                  given: Mapping[int, np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """Evaluate the model's main graph in float64 (a path, .tflite bytes, a read Model or a Graph).

    feeds: {input tensor index: value} or the values in the graph's input order; quantized inputs are given as
    their stored integers (as set_tensor takes them) and dequantized. Returns {output tensor index: value}
    (every tensor, constants included, with all_tensors=True, to compare intermediates); real tensors are
    float64, integer and bool tensors int64 and bool. An op without a definition here raises
    NotImplementedError naming it.

    round_to (e.g. np.float32 or np.float16): every real result is rounded to that type once, after its op is
    evaluated exactly — an engine whose every op is correctly rounded, the least error any engine holding
    tensors in that type can have on the model (its distance from the exact run measures how ill-conditioned
    the model is; tests/test_accuracy.py). round_only: round only these tensors (inputs included): an engine that
    stores just those in that type (mixed precision, gpuengine/mixed_precision.py).

    given: values to take as they are for tensors no rounded tensor feeds (an earlier run's all_tensors values of
    the ops before the first rounded one): ops whose outputs are all given are skipped, so a run that rounds only
    late tensors costs only the ops after them.
    """
    graph = _graph(model)
    if not isinstance(feeds, Mapping):
        feeds = dict(zip(graph.inputs, feeds))
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise ValueError(f"no value fed for inputs {missing}")
    values: dict[int, np.ndarray] = {t: feed_value(graph.tensors[t], feeds[t]) for t in graph.inputs}

    def rounded(t: int) -> bool:
        return round_to is not None and is_real(graph.tensors[t]) and (round_only is None or t in round_only)

    for t in graph.inputs:
        if round_only is not None and rounded(t):
            values[t] = values[t].astype(round_to).astype(F64)

    def value(t: int) -> np.ndarray:
        if t not in values:
            tensor = graph.tensors[t]
            if tensor.data is None:
                raise ValueError(f"tensor {t} ({tensor.name!r}) is read before it is written")
            values[t] = _constant(tensor)
        return values[t]

    for op in graph.ops:
        if given is not None and op.outputs and all(t in given and not rounded(t) for t in op.outputs):
            values.update((t, given[t]) for t in op.outputs)
            continue
        fn = (CUSTOM_OPS if op.is_custom else BUILTIN_OPS).get(op.code)
        if fn is None:
            raise NotImplementedError(f"op {op.index} ({op.code}) has no float64 reference definition")
        with np.errstate(all="ignore"):
            outs = fn(Node(op, graph, [value(t) if t >= 0 else None for t in op.inputs]))
        if len(outs) != len(op.outputs):
            raise ValueError(f"op {op.index} ({op.code}): {len(outs)} results for {len(op.outputs)} outputs")
        for t, v in zip(op.outputs, outs):
            values[t] = _as_declared(graph.tensors[t], v)
            if rounded(t):
                values[t] = values[t].astype(round_to).astype(F64)
    if all_tensors:
        for t in range(len(graph.tensors)):
            if graph.tensors[t].data is not None:
                value(t)
        return values
    return {t: value(t) for t in graph.outputs}


class SignatureRunner:
    """A signature run in float64, called as LiteRT's signature runners are: runner(**named inputs) -> {output name:
    value}. STABLEHLO_COMPOSITE ops (litert-torch's attention, RMSNorm) are evaluated through their decomposition
    subgraphs, inlined once here (passes/inline_composites.py), so the model's own definition is what runs."""

    def __init__(self, model: bytes | str | os.PathLike | Model, key: str) -> None:
        from .passes.inline_composites import inline_composites

        if not isinstance(model, Model):
            model = read_model(model)
            validate_model(model)
        signatures = {s.key: s for s in model.signatures}
        if key not in signatures:
            raise ValueError(f"Invalid signature_key provided: {key!r}; available: {sorted(signatures)}")
        self.signature = signatures[key]
        self.graph = inline_composites(model.subgraphs[self.signature.subgraph], model)

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        sig = self.signature
        missing = sorted(set(sig.inputs) - set(inputs))
        if missing:
            raise ValueError(f"Missing inputs for signature {sig.key!r}: {missing}")
        values = run_reference(self.graph, {t: inputs[name] for name, t in sig.inputs.items()})
        return {name: values[t] for name, t in sig.outputs.items()}
