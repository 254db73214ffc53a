"""Small helpers every kernel module shares: shapes, support checks, activations, operand reads."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...model.ir import Graph, Op, Tensor
from ...model.quantization import QUANTIZED_TYPES, dequantize, is_quantized
from ..codegen import f32_literal
from ..layout import slices, to_bhwc, to_phwc4
from . import wgsl_math
from .base import Binding, Code


def keep_nan(expr: str, x: str) -> str:
    """`expr`, except where the f32 vec4 `x` is NaN: there x. WGSL's min/max/clamp may drop a NaN (lavapipe's
    do) where LiteRT's RELUs keep it; `x != x` can be folded away, so NaN is told by its bit pattern."""
    return f"select({expr}, {x}, (bitcast<vec4<u32>>({x}) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u))"


# TFLite ActivationFunctionType -> epilogue applied to `value` (NaN passes through, as in LiteRT).
_ACTIVATIONS = {
    0: None,
    1: f"value = {keep_nan('max(value, vec4<f32>(0.0))', 'value')};",
    2: f"value = {keep_nan('clamp(value, vec4<f32>(-1.0), vec4<f32>(1.0))', 'value')};",
    3: f"value = {keep_nan('clamp(value, vec4<f32>(0.0), vec4<f32>(6.0))', 'value')};",
}
# LiteRT's float kernels (ADD, MUL, CONV_2D, ...) clamp only for RELU/RELU6/RELU_N1_TO_1 and silently skip a
# fused TANH or SIGN_BIT (checked against LiteRT 2.3.0), so the GPU refuses those rather than disagree.
_IGNORED_BY_LITERT = {4: "TANH", 5: "SIGN_BIT"}


def bhwc(graph: Graph, t: int) -> tuple[int, int, int, int]:
    return to_bhwc(graph.tensors[t].shape)


def activation(op: Op) -> list[Code]:
    code = int(op.opt("fused_activation_function", 0) or 0)
    line = _ACTIVATIONS.get(code)
    return [Code(line)] if line else []


def activation_supported(op: Op) -> str | None:
    code = int(op.opt("fused_activation_function", 0) or 0)
    if code in _ACTIVATIONS:
        return None
    if code in _IGNORED_BY_LITERT:
        return f"fused activation {_IGNORED_BY_LITERT[code]} (LiteRT's CPU kernels ignore it; left to them)"
    return f"fused activation {code} is not supported"


def is_const(graph: Graph, t: int) -> bool:
    return t >= 0 and graph.tensors[t].data is not None


def fake_quant(tensor: Tensor) -> Code:
    """Round `value` to the tensor's quantization grid and clamp it to its integer range, as LiteRT's integer
    kernels store it: q = clamp(round(value / scale) + zero_point) with ties away from zero (TFLite's rounding;
    WGSL's round() breaks ties to even), then value = (q - zero_point) * scale."""
    q = tensor.quantization
    scale = float(q.scale[0])  # type: ignore[union-attr]
    zero = float(q.zero_point[0]) if q.zero_point.size else 0.0  # type: ignore[union-attr]
    lo, hi = QUANTIZED_TYPES[tensor.dtype]
    r = f"value * {f32_literal(1.0 / scale)}"
    return Code(f"{{ let r = {r}; let q = clamp(sign(r) * floor(abs(r) + 0.5) + {f32_literal(zero)}, "
                f"vec4<f32>({f32_literal(float(lo))}), vec4<f32>({f32_literal(float(hi))})); "
                f"value = (q - {f32_literal(zero)}) * {f32_literal(scale)}; }}")


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real = multiplier * 2^(shift - 31), multiplier a Q31 int32 (rounded half away
    from zero)."""
    if real == 0.0:
        return 0, 0
    fraction, shift = math.frexp(real)
    multiplier = int(math.floor(abs(fraction) * (1 << 31) + 0.5)) * (1 if fraction >= 0 else -1)
    if abs(multiplier) == 1 << 31:
        multiplier //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return multiplier, shift


def integer_requant(tensor: Tensor, unit: float, multiplier: int, shift: int) -> Code:
    """Round `value` to the tensor's grid as LiteRT's integer kernels do after accumulating in int32: the
    accumulator acc = value / unit (an integer), then MultiplyByQuantizedMultiplier(acc, multiplier, shift) — a
    rounding doubling high multiply by the Q31 multiplier, then a rounding right shift: two roundings, each half
    away from zero, which the one rounding of fake_quant misses by a step on ~10% of the elements — plus the zero
    point, clamped. In f32: exact while |acc| * 2^left stays below 2^24 and no product lands within f32 rounding
    of a tie."""
    q = tensor.quantization
    scale = float(q.scale[0])  # type: ignore[union-attr]
    zero = float(q.zero_point[0]) if q.zero_point.size else 0.0  # type: ignore[union-attr]
    lo, hi = QUANTIZED_TYPES[tensor.dtype]
    left, right = max(shift, 0), max(-shift, 0)
    high = f32_literal(float(multiplier) * 2.0 ** (left - 31))
    return Code(f"{{ let acc = sign(value) * floor(abs(value * {f32_literal(1.0 / unit)}) + 0.5); "
                f"let high = acc * {high}; let t = sign(high) * floor(abs(high) + 0.5); "
                f"let shifted = t * {f32_literal(2.0 ** -right)}; "
                f"let q = clamp(sign(shifted) * floor(abs(shifted) + 0.5) + {f32_literal(zero)}, "
                f"vec4<f32>({f32_literal(float(lo))}), vec4<f32>({f32_literal(float(hi))})); "
                f"value = (q - {f32_literal(zero)}) * {f32_literal(scale)}; }}")


# The output stages of LiteRT's builtin integer FULLY_CONNECTED and BATCH_MATMUL, in exact 32-bit integer
# arithmetic (WGSL has no i64): a rounding doubling high multiply by the Q31 multiplier (the 31-bit high half of the
# 62-bit product |x| * multiplier from 16-bit partial products, nudged as SaturatingRoundingDoublingHighMul and
# ARM's SQRDMULH do), then a rounding right shift. BATCH_MATMUL uses TFLite's MultiplyByQuantizedMultiplier, whose
# RoundingDivideByPOT rounds ties away from zero; FULLY_CONNECTED's GEMM runs through ruy, whose shift rounds ties
# up (as ARM's SRSHL): they differ on negative ties (measured against LiteRT 2.3.0).
MULTIPLY_BY_QUANTIZED_MULTIPLIER = Code(wgsl_math.MULTIPLY_BY_QUANTIZED_MULTIPLIER)


def accumulator_requant(tensor: Tensor, multiplier: str, shift: str, ruy: bool,
                        clamp: tuple[int, int] | None = None) -> Code:
    """`value` holds an exact int32 accumulator (as f32): LiteRT's builtin FC / BATCH_MATMUL output stage
    (MULTIPLY_BY_QUANTIZED_MULTIPLIER, ties of the shift up where `ruy`, else away from zero) by `multiplier` /
    `shift` (WGSL vec4<i32> expressions, per channel or not), plus the zero point, clamped to `clamp` (a fused
    activation's integer range, activation_range) or the type's range; then the real value the GPU holds. The spec
    must include MULTIPLY_BY_QUANTIZED_MULTIPLIER in its functions."""
    q = tensor.quantization
    scale = float(q.scale[0])  # type: ignore[union-attr]
    zero = int(q.zero_point[0]) if q.zero_point.size else 0  # type: ignore[union-attr]
    lo, hi = clamp if clamp is not None else QUANTIZED_TYPES[tensor.dtype]
    return Code(f"{{ let q = clamp(multiply_by_quantized_multiplier(vec4<i32>(round(value)), {multiplier}, {shift}, "
                f"{'true' if ruy else 'false'}) + vec4<i32>({zero}), vec4<i32>({lo}), vec4<i32>({hi})); "
                f"value = vec4<f32>(q - vec4<i32>({zero})) * {f32_literal(scale)}; }}")


# -- fully int8 ops with exact integer sums (FULLY_CONNECTED, BATCH_MATMUL, CONV_2D) ---------------------------

ACTIVATIONS_EXACT = (0, 1)  # NONE, RELU: applied to the accumulator they commute with LiteRT's clamp after rounding
CLAMPED_ACTIVATIONS = (0, 1, 2, 3)  # and RELU_N1_TO_1, RELU6: as LiteRT, a clamp of the integers (activation_range)
_ACTIVATION_BOUNDS = {0: (None, None), 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


def activation_range(op: Op, out: Tensor) -> tuple[int, int]:
    """LiteRT's CalculateActivationRangeQuantized: the integers a fused NONE / RELU / RELU_N1_TO_1 / RELU6 keeps,
    its real bounds quantized (zero point + round(f / scale), half away from zero), within the type's range."""
    lo, hi = QUANTIZED_TYPES[out.dtype]
    scale = np.float32(out.quantization.scale[0])  # type: ignore[union-attr]
    zero = int(out.quantization.zero_point[0]) if out.quantization.zero_point.size else 0  # type: ignore[union-attr]

    def quantize(f: float) -> int:
        r = float(np.float32(f) / scale)
        return zero + int(math.copysign(math.floor(abs(r) + 0.5), r))

    low, high = _ACTIVATION_BOUNDS[int(op.opt("fused_activation_function", 0) or 0)]
    return (lo if low is None else max(lo, quantize(low)), hi if high is None else min(hi, quantize(high)))
# LiteRT's builtin int8 kernels whose output stage rounds the shift's ties up: FULLY_CONNECTED and CONV_2D (their
# GEMM runs through ruy, CONV_2D after im2col) and DEPTHWISE_CONV_2D (its x86 kernel); TFLite's own
# MultiplyByQuantizedMultiplier (BATCH_MATMUL) rounds them away from zero (measured against LiteRT 2.3.0)
TIES_UP_OPS = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D")


@dataclass
class Int8Requant:
    """How a fully int8 FC, CONV_2D or BATCH_MATMUL computes LiteRT's integers: its operands read as integers
    (q - zero point = round(real / scale)), integer weights and bias, sums exact in f32 (every partial sum below
    2^24, checked from the weights and the operands' ranges), then the int32 accumulator requantized per output
    channel."""

    multipliers: np.ndarray  # int32 Q31 multiplier per output channel (one for BATCH_MATMUL / per-tensor weights)
    shifts: np.ndarray  # int32 exponent per output channel
    inverse_scales: tuple[float, ...]  # 1 / scale of each run-time operand
    weights: np.ndarray | None = None  # FC [O, I] / CONV_2D [O, KH, KW, I]: integer weights as f32
    bias: np.ndarray | None = None  # integer bias [O] as f32


def quantized_span(tensor: Tensor) -> int:
    """The largest |q - zero point| of an int8 run-time tensor."""
    zero = int(tensor.quantization.zero_point[0]) if tensor.quantization.zero_point.size else 0  # type: ignore
    lo, hi = QUANTIZED_TYPES[tensor.dtype]
    return max(abs(lo - zero), abs(hi - zero))


def int8_tensors(*tensors: Tensor) -> bool:
    return all(t.dtype == np.int8 and is_quantized(t) for t in tensors)


def weights_requant(op: Op, graph: Graph, channel_axis: int = 0,
                    activations: tuple[int, ...] = ACTIVATIONS_EXACT) -> Int8Requant | None:
    """LiteRT's integer computation of an op with an int8 input 0 and output, constant symmetric int8 weights
    (input 1, per tensor or per output channel on `channel_axis`: 0 for FULLY_CONNECTED and CONV_2D, 3 for
    DEPTHWISE_CONV_2D), an optional int32 bias (input 2) and one of the fused `activations` (NONE or RELU, applied
    to the accumulator; the conv family also takes CLAMPED_ACTIVATIONS, applied as the output stage's clamp), where
    f32 sums stay exact; None otherwise (the op then computes in float and rounds once, fake_quant)."""
    x, w, out = graph.tensors[op.inputs[0]], graph.tensors[op.inputs[1]], graph.tensors[op.outputs[0]]
    bias_t = op.inputs[2] if len(op.inputs) > 2 else -1
    bias = graph.tensors[bias_t] if bias_t >= 0 else None
    wq = w.quantization
    if not int8_tensors(x, out) or w.dtype != np.int8 or wq is None or w.data is None \
            or int(op.opt("fused_activation_function", 0) or 0) not in activations \
            or (wq.zero_point.size and np.any(wq.zero_point != 0)) \
            or wq.scale.size not in (1, w.shape[channel_axis]) or (wq.scale.size > 1 and wq.axis != channel_axis):
        return None
    if bias is not None and (bias.dtype != np.int32 or bias.data is None or bias.quantization is None):
        return None
    weights = np.asarray(w.data, np.int64)
    channels = w.shape[channel_axis]
    bias_q = np.asarray(bias.data, np.int64).reshape(-1) if bias is not None else np.zeros(channels, np.int64)
    per_channel = np.moveaxis(np.abs(weights), channel_axis, 0).reshape(channels, -1).sum(axis=1)
    if bias_q.size != channels or np.max(per_channel * quantized_span(x) + np.abs(bias_q)) >= EXACT_LIMIT:
        return None
    sx, so = float(x.quantization.scale[0]), float(out.quantization.scale[0])  # type: ignore[union-attr]
    pairs = [quantize_multiplier(sx * float(s) / so) for s in np.broadcast_to(wq.scale, (channels,))]
    return Int8Requant(np.array([m for m, _ in pairs], np.int64), np.array([s for _, s in pairs], np.int64),
                       (1.0 / sx,), weights.astype(np.float32), bias_q.astype(np.float32))


def requant_binding(rq: Int8Requant, channels: int, so_pad: int) -> Binding:
    """Per output slice, two vec4<u32>: the lanes' Q31 multipliers and their shifts (bit patterns of i32)."""
    table = np.zeros((2, so_pad * 4), np.int32)
    table[0, :channels] = rq.multipliers
    table[1, :channels] = rq.shifts
    table = np.ascontiguousarray(table.reshape(2, so_pad, 4).transpose(1, 0, 2))
    return Binding("requant", data=table.view(np.uint32).reshape(-1), element="vec4<u32>")


def requant_code(op: Op, rq: Int8Requant, out: Tensor) -> Code:
    """The epilogue statement rounding the accumulator in `value` as LiteRT does: per-channel multipliers are read
    from the `requant` binding at the output slice `os`, a single one is baked. Ties of the shift go up for the
    TIES_UP_OPS, away from zero for BATCH_MATMUL. The result is clamped to the fused activation's integer range
    (LiteRT's clamp; a RELU already applied to the accumulator gives the same integers)."""
    ruy = op.code in TIES_UP_OPS
    clamp = activation_range(op, out)
    if rq.multipliers.size > 1:
        return accumulator_requant(out, "bitcast<vec4<i32>>(requant[os * 2u])",
                                   "bitcast<vec4<i32>>(requant[os * 2u + 1u])", ruy, clamp)
    return accumulator_requant(out, f"vec4<i32>({int(rq.multipliers[0])})", f"vec4<i32>({int(rq.shifts[0])})", ruy,
                               clamp)


# Integer tensors the GPU holds exactly, as f32 values (exact for |x| < 2^24: token ids, positions, masks), stored
# as f32 whatever the precision (f16 is exact only to 2048). Bool is 1.0 / 0.0. Values crossing the host boundary
# convert to and from the tensor's dtype (runtime/program.py); kernels whose op has integer semantics on them
# (index, copy, compare, select, exact integer arithmetic) accept them with float_tensors(..., integers=True).
EXACT_TYPES = (np.dtype(np.int32), np.dtype(np.bool_))
EXACT_LIMIT = 1 << 24  # |int32| below this is exact in f32


def holds_integers(tensor: Tensor) -> bool:
    """A run-time int32 or bool tensor (exact in f32 storage, never f16)."""
    return tensor.dtype in EXACT_TYPES and tensor.quantization is None


def float_tensors(op: Op, graph: Graph, inputs: list[int] | None = None, integers: bool = False) -> str | None:
    """GPU tensors are float (f32, or quantized integers held as their real values) and rank <= 4: check the
    tensors an op reads and writes. integers: the op's kernel also takes run-time int32 / bool tensors (held as
    exact f32 values, see EXACT_TYPES)."""
    ins = op.inputs if inputs is None else [op.inputs[i] for i in inputs if i < len(op.inputs)]
    for t in [*ins, *op.outputs]:
        if t < 0:
            continue
        tensor = graph.tensors[t]
        if len(tensor.shape) > 4:
            return f"tensor {tensor.name!r} has rank {len(tensor.shape)} (> 4)"
        if integers and holds_integers(tensor):
            continue
        if tensor.data is None and tensor.dtype != np.float32 and not is_quantized(tensor):
            if tensor.dtype in QUANTIZED_TYPES:
                return f"tensor {tensor.name!r} is {tensor.dtype} without one scale and zero point"
            return f"tensor {tensor.name!r} is {tensor.dtype}, only float32 and quantized int8 run on the GPU"
        if tensor.data is not None and tensor.dtype not in (np.float32, np.int32, np.int64) \
                and not (tensor.quantization is not None and tensor.dtype in (*QUANTIZED_TYPES, np.dtype(np.int32))):
            return f"constant {tensor.name!r} is {tensor.dtype}"
    return None


def tensor_values(tensor: Tensor) -> np.ndarray:
    """A constant's real values as float32: quantized integers (int8/uint8/int16/int4, int32 biases; per tensor or
    per channel) dequantized, as LiteRT's kernels read them."""
    if tensor.quantization is not None and (tensor.dtype != np.float32 or tensor.type_code == 17):
        return dequantize(tensor)
    return np.asarray(tensor.data, dtype=np.float32)


def const_f32(graph: Graph, t: int) -> np.ndarray:
    return tensor_values(graph.tensors[t])


# BHWC axis (0..3) of each logical dim, by rank (layout.py's rank < 4 rule).
_AXES = {0: (), 1: (3,), 2: (0, 3), 3: (0, 2, 3), 4: (0, 1, 2, 3)}


def on_grid(tensor: Tensor) -> bool:
    """An 8-bit tensor quantized per tensor (run-time or constant): its real values lie on one grid of steps."""
    q = tensor.quantization
    return tensor.dtype.itemsize == 1 and tensor.dtype in QUANTIZED_TYPES and q is not None and q.scale.size == 1 \
        and float(q.scale[0]) > 0


def operand(graph: Graph, t: int, out_shape: tuple[int, ...], name: str,
            shape: tuple[int, ...] | None = None, zero_extend: bool = False) -> tuple[Code, list[Binding]]:
    """A WGSL function `read_<name>(b, y, x, s) -> vec4<f32>` reading tensor t broadcast to out_shape.

    out_shape is the output's logical shape (rank <= 4); `shape` the operand's logical shape (default: its
    own), right-aligned with out_shape as in numpy. A non-constant tensor is stored in the PHWC4 layout of
    its *own* rank, so its dims are mapped to the output's BHWC axes one by one (a rank-3 (B, W, C) operand of
    a rank-4 output reads its B axis with the output's H index); its logical shape must be its own shape,
    possibly left-padded with 1s. Scalar constants are baked as literals; other constants are laid out here
    in the output's frame (so any reshape of them is allowed) and bound as PHWC4 data. zero_extend: the operand
    has fewer channels than the output and reads as zero beyond them (a channel PAD merged into its reader).
    """
    tensor = graph.tensors[t]
    rank = len(out_shape)
    logical = tuple(int(d) for d in (shape if shape is not None else tensor.shape))
    if len(logical) > rank:
        raise ValueError(f"operand {tensor.name!r} of shape {logical} has a higher rank than {out_shape}")
    logical = (1,) * (rank - len(logical)) + logical
    fn = f"fn read_{name}(b: u32, y: u32, x: u32, s: u32) -> vec4<f32> {{\n"
    if tensor.data is not None and tensor.size == 1:
        text = f32_literal(float(tensor_values(tensor).reshape(-1)[0]))
        return Code(fn + f"  return vec4<f32>({text});\n}}\n"), []
    if tensor.data is not None:
        own = logical
    else:
        own = tuple(int(d) for d in tensor.shape)
        if (1,) * (rank - len(own)) + own != logical:
            raise ValueError(f"tensor {tensor.name!r} of shape {own} cannot be read as {logical}")
    storage = to_bhwc(own)
    out_vars = ("b", "y", "x", "s")
    idx = ["0u", "0u", "0u", "0u"]
    for j, d in enumerate(own[:-1]):
        if d > 1:
            idx[_AXES[len(own)][j]] = out_vars[_AXES[rank][j + rank - len(own)]]
    c_ = storage[3]
    splat = c_ == 1 and to_bhwc(out_shape)[3] > 1 and not zero_extend
    idx_s = "0u" if (splat or (slices(c_) == 1 and not zero_extend)) else "s"
    b_, h_, w_ = storage[:3]
    index = f"(({idx[0]} * {slices(c_)}u + {idx_s}) * {h_}u + {idx[1]}) * {w_}u + {idx[2]}"
    var = f"in_{name}"
    load = f"vec4<f32>({var}[{index}])"
    if on_grid(tensor):
        # an 8-bit quantized tensor read back onto its grid: the f32 value it holds in fp32 exactly; in fp16 the
        # stored value is f16-rounded (by up to 0.12 of a step), and an integer op computed on it can miss LiteRT's
        scale = float(tensor.quantization.scale[0])  # type: ignore[union-attr]
        load = f"round({load} * {f32_literal(1.0 / scale)}) * {f32_literal(scale)}"
    body = f"  let v = {load};\n" + ("  return vec4<f32>(v.x);\n" if splat else "  return v;\n")
    if zero_extend:  # lanes past the channels inside the last slice are already zero in PHWC4 storage
        body = f"  if (s >= {slices(c_)}u) {{ return vec4<f32>(0.0); }}\n" + body
    if tensor.data is not None:
        binding = Binding(var, data=to_phwc4(tensor_values(tensor).reshape(storage)))
    else:
        binding = Binding(var, tensor=t)
    return Code(fn + body + "}\n"), [binding]


def broadcastable(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> bool:
    try:
        return tuple(np.broadcast_shapes(a, b)) == tuple(out)
    except ValueError:
        return False
