"""Quantized values, written once: INT4 packing, dequantization, and the tests passes and kernels share on what a
quantized tensor is."""

from __future__ import annotations

from typing import Any

import numpy as np

from .ir import Graph, Op, Tensor

INT4 = 17  # TensorType INT4: two values per byte, low nibble first
QUANTIZED_TYPES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767)}


def unpack_int4(t: Tensor) -> np.ndarray:
    """TFLite's INT4 buffers hold two values a byte, the first in the low nibble, both sign-extended."""
    raw = np.asarray(t.data, np.uint8).reshape(-1)
    values = np.empty(raw.size * 2, np.int8)
    values[0::2] = (raw << 4).astype(np.uint8).view(np.int8) >> 4
    values[1::2] = raw.view(np.int8) >> 4
    return values[:t.size].reshape(t.shape)


def pack_int4(values: np.ndarray) -> np.ndarray:
    """unpack_int4's inverse: values in -8..7 as TFLite's INT4 bytes (row-major, first value in the low nibble)."""
    flat = np.asarray(values, np.int8).reshape(-1)
    assert flat.size == 0 or (flat.min() >= -8 and flat.max() <= 7), "int4 values out of range"
    nibbles = np.zeros(flat.size + flat.size % 2, np.uint8)
    nibbles[:flat.size] = flat.view(np.uint8) & 0xF
    return nibbles[0::2] | (nibbles[1::2] << 4)


def has_scales(t: Tensor) -> bool:
    """Integers carrying quantization parameters: their values are real numbers."""
    q = t.quantization
    return q is not None and (q.scale.size > 0 or q.blockwise)


def dequantize(t: Tensor, data: Any = None, dtype: Any = np.float32) -> np.ndarray:
    """Real values of tensor t as `dtype`: `data` (integers of t's type, e.g. a run-time feed) or t's stored
    values (INT4 unpacked); per tensor, per channel or blockwise; floats and unscaled integers are only cast."""
    if data is None:
        data = unpack_int4(t) if t.type_code == INT4 else t.data
    data = np.asarray(data)
    if not np.issubdtype(data.dtype, np.integer) or not has_scales(t):
        return data.astype(dtype)
    q = t.quantization
    if q.blockwise:  # a scale per run of block_size values along the last axis
        return data.astype(dtype) * np.repeat(q.block_scales.astype(dtype), q.block_size, axis=-1)
    shape = [1] * data.ndim
    if q.per_channel and data.ndim:
        shape[q.axis] = -1
    scale = q.scale.astype(dtype).reshape(shape) if q.per_channel else dtype(q.scale.reshape(-1)[0])
    zero = q.zero_point.astype(dtype) if q.zero_point.size else np.zeros(1, dtype)
    zero = zero.reshape(shape) if q.per_channel and zero.size > 1 else dtype(zero.reshape(-1)[0])
    return ((data.astype(dtype) - zero) * scale).astype(dtype)


def is_quantized(tensor: Tensor) -> bool:
    """A run-time tensor of quantized integers with one scale and zero point. On the GPU it holds its real values
    ((q - zero_point) * scale) as floats; the kernel writing it rounds them to its grid (`fake_quant`), as the
    TFLite GPU delegate emulates quantized models."""
    q = tensor.quantization
    return (tensor.data is None and tensor.dtype in QUANTIZED_TYPES and q is not None and q.scale.size == 1
            and float(q.scale[0]) > 0)


def int8_values(tensor: Tensor) -> np.ndarray | None:
    """The int8 values of a constant quantized symmetrically per row (axis 0) or per tensor, as int8 (int4 tables
    unpacked): None for anything else (a nonzero zero point, another axis, another type)."""
    q = tensor.quantization
    if tensor.data is None or q is None or len(tensor.shape) < 1 or tensor.shape[0] < 1:
        return None
    if tensor.type_code == INT4:
        data = np.asarray(unpack_int4(tensor))
    elif tensor.dtype == np.int8:
        data = np.asarray(tensor.data)
    else:
        return None
    if q.zero_point.size and np.any(q.zero_point != 0):
        return None
    if q.blockwise:
        if len(tensor.shape) != 2 or not np.all(np.isfinite(q.block_scales)):
            return None
    elif q.scale.size not in (1, tensor.shape[0]) or (q.scale.size > 1 and q.axis != 0):
        return None
    if not np.all(np.isfinite(q.scale)):
        return None
    return data.astype(np.int8).reshape(tensor.shape)


def is_hybrid(op: Op, graph: Graph) -> bool:
    """A float FULLY_CONNECTED with symmetric int8 (or int4) weights per output channel: LiteRT quantizes its
    input rows and sums in integers, and so does the GPU by default (hybrid_in_float: in float); the weights stay
    packed int8 on it either way."""
    x, w = (graph.tensors[t] for t in op.inputs[:2])
    out = graph.tensors[op.outputs[0]]
    q = w.quantization
    if q is not None and q.blockwise and x.shape[-1] % 4 and w.shape[1] != x.shape[-1] and q.block_size % x.shape[-1]:
        return False  # a word (4 channels of one pixel) must lie in one block: pixels of 4k channels, or whole pixels
    return (x.dtype == np.float32 and x.quantization is None and out.dtype == np.float32
            and out.quantization is None and int8_values(w) is not None)
