"""Op-level validation, before anything runs a model: a malformed op becomes a ModelError naming the op index,
the op and what is wrong, instead of a LiteRT prepare error in the CPU fallback, a division by zero in a
kernel's arithmetic or WGSL that does not compile.

The reader (model/reader.py) checks the file format: offsets, index ranges, buffer sizes. This module checks
what the ops make of it:

* dataflow, for every op: each input is a constant, a graph input, a variable or the output of an earlier op;
  each tensor is written once, never a constant or a graph input; every graph output is written;
* subgraph references (WHILE, IF, CALL_ONCE, STABLEHLO_COMPOSITE ...) in range, with matching input and output
  counts and no cycles;
* per op, from the RULES table: input/output counts, which inputs may be omitted (-1), ranks, dtypes, option
  ranges (enums, strides >= 1, axes in range), constant operands (paddings >= 0, a permutation for TRANSPOSE,
  gather indices in range ...) and, where the shape rule is simple, the declared output shapes against the
  inputs (skipped for tensors whose shape_signature has -1: their declared shape is a placeholder);
* memory: the bytes of all non-constant tensors against what this process can still allocate, so a huge
  declared shape is refused before any allocation.

Ops without a rule (custom ops, rare builtins) get the generic checks only. Options that are absent, or
stored as another op's options table, read as the schema's defaults, as LiteRT reads them (a CONV_2D without
Conv2DOptions has stride 0).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import resource
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
from flatbuffers import flexbuffers
from flatbuffers.table import Table

from ..errors import ModelError
from .builder import _schema_module, options_kind
from .ir import Graph, Model, Op, Tensor
from .ops import SAME, VALID, out_size
from .reader import _decode_options

FLOAT = frozenset({np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)})
INDEX = frozenset({np.dtype(np.int32), np.dtype(np.int64)})
BOOL = np.dtype(np.bool_)
ACTIVATIONS = range(6)  # NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT


class Invalid(Exception):  # noqa: N818 - internal: what is wrong with one op, raised by a rule
    """Raised by a rule; validate_graph adds the op index and code and raises ModelError."""


# -- a view of one op for the rules --------------------------------------------------------------------------------
class OpView:
    """The op's tensors and options as the rules need them (absent options read as schema defaults)."""

    def __init__(self, op: Op, graph: Graph, options_kind: str | None) -> None:
        self.op, self.graph = op, graph
        self.options_kind = options_kind
        own = op.options is not None and op.options.kind == options_kind
        self.fields: dict[str, Any] = dict(op.options.fields) if own and op.options is not None else {}

    @property
    def n_in(self) -> int:
        return len(self.op.inputs)

    def has(self, i: int) -> bool:
        return i < len(self.op.inputs) and self.op.inputs[i] >= 0

    def tensor(self, i: int) -> Tensor:
        return self.graph.tensors[self.op.inputs[i]]

    def out(self, k: int = 0) -> Tensor:
        return self.graph.tensors[self.op.outputs[k]]

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.tensor(i).shape)

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        return tuple(self.out(k).shape)

    def rank(self, i: int) -> int:
        return len(self.tensor(i).shape)

    def const(self, i: int) -> np.ndarray | None:
        """Input i's values when it is a constant (None when it is computed at run time or absent)."""
        if not self.has(i):
            return None
        data = self.tensor(i).data
        if data is None or self.tensor(i).sparsity is not None or self.tensor(i).type_code in (5, 13, 14, 17):
            return None
        return np.asarray(data)

    def ints(self, i: int) -> list[int] | None:
        values = self.const(i)
        if values is None or values.dtype.kind not in "iu":
            return None
        return [int(v) for v in values.reshape(-1)]

    def opt(self, name: str) -> Any:
        if name in self.fields and self.fields[name] is not None:
            return self.fields[name]
        return schema_default(self.options_kind, name) if self.options_kind else None

    def axis(self, value: int, rank: int, what: str = "axis") -> int:
        """value normalized into [0, rank), or Invalid."""
        if not -rank <= value < rank:
            raise Invalid(f"{what} {value} is out of range for rank {rank} (must be in [{-rank}, {rank - 1}])")
        return value + rank if value < 0 else value


@functools.cache
def schema_default(kind: str, name: str) -> Any:
    """The value LiteRT reads for an options field that is absent (an empty table decoded)."""
    b = flatbuffers.Builder(64)
    mod = _schema_module(kind)
    mod.Start(b)
    b.Finish(mod.End(b))
    buf = bytes(b.Output())
    root = int.from_bytes(buf[0:4], "little")
    return _decode_options(kind, Table(buf, root)).fields.get(name)


# -- checks a rule is made of ---------------------------------------------------------------------------------------
Check = Callable[[OpView], None]
ShapeRule = Callable[[OpView], "Sequence[tuple[int, ...]] | None"]


def at_least(name: str, low: int) -> Check:
    def check(v: OpView) -> None:
        value = v.opt(name)
        if value is None or int(value) < low:
            raise Invalid(f"{name} is {value}, must be >= {low}" + _absent_note(v, name))
    return check


def one_of(name: str, allowed: Sequence[int], what: str = "") -> Check:
    def check(v: OpView) -> None:
        value = v.opt(name)
        if value is not None and int(value) not in allowed:
            raise Invalid(f"{name} is {value}, must be one of {list(allowed)}{what}")
    return check


def finite(name: str) -> Check:
    def check(v: OpView) -> None:
        value = v.opt(name)
        if value is not None and not np.isfinite(float(value)):
            raise Invalid(f"{name} is {value}, must be finite")
    return check


ACTIVATION = one_of("fused_activation_function", ACTIVATIONS, " (NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT)")
PADDING = one_of("padding", (SAME, VALID), " (SAME, VALID)")


def _absent_note(v: OpView, name: str) -> str:
    if name in v.fields:
        return ""
    if v.op.options is None:
        return f" (the op has no {v.options_kind}: the schema default)"
    if v.op.options.kind != v.options_kind:
        return f" (the op carries {v.op.options.kind}, not {v.options_kind}: its options read as absent)"
    return f" (absent from the op's {v.options_kind}: the schema default)"


def index_dtype(*positions: int) -> Check:
    """Inputs holding indices, shapes or axes are int32 or int64."""
    def check(v: OpView) -> None:
        for i in positions:
            if v.has(i) and v.tensor(i).dtype not in INDEX:
                raise Invalid(f"input {i} ({v.tensor(i).name!r}) is {v.tensor(i).dtype}, must be int32 or int64")
    return check


def dtype_in(position: int, allowed: frozenset, what: str) -> Check:
    def check(v: OpView) -> None:
        t = v.tensor(position) if position >= 0 else v.out(-position - 1)
        if t.dtype not in allowed:
            raise Invalid(f"{'input ' + str(position) if position >= 0 else 'output'} ({t.name!r}) is {t.dtype}, "
                          f"must be {what}")
    return check


def same_dtype(inputs: Sequence[int], outputs: bool = True) -> Check:
    """The data inputs (and the outputs) share one element type."""
    def check(v: OpView) -> None:
        tensors = [(f"input {i}", v.tensor(i)) for i in inputs if v.has(i)]
        if outputs:
            tensors += [(f"output {k}", v.out(k)) for k in range(len(v.op.outputs))]
        if not tensors:
            return
        first = tensors[0][1].dtype
        for what, t in tensors[1:]:
            if t.dtype != first:
                raise Invalid(f"{what} ({t.name!r}) is {t.dtype}, {tensors[0][0]} ({tensors[0][1].name!r}) is {first}:"
                              " they must have the same type")
    return check


def all_inputs_same_dtype(outputs: bool = True) -> Check:
    def check(v: OpView) -> None:
        same_dtype(range(v.n_in), outputs)(v)
    return check


def bool_output(v: OpView) -> None:
    if v.out().dtype != BOOL:
        raise Invalid(f"output ({v.out().name!r}) is {v.out().dtype}, must be bool")


def float_output(v: OpView) -> None:
    if v.out().dtype not in FLOAT:
        raise Invalid(f"output ({v.out().name!r}) is {v.out().dtype}, must be a float type")


# -- shape rules ----------------------------------------------------------------------------------------------------
def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise Invalid(f"input shapes {', '.join(str(s) for s in shapes)} do not broadcast") from None


def same_as_input(v: OpView) -> list[tuple[int, ...]]:
    return [v.shape(0)] * len(v.op.outputs)


def broadcast_inputs(v: OpView) -> list[tuple[int, ...]]:
    return [_broadcast(*(v.shape(i) for i in range(v.n_in) if v.has(i)))]


def window_out_size(padding: int, size: int, k: int, stride: int, dilation: int, what: str) -> int:
    """TFLite's ComputeOutSize (model/ops.py out_size), refusing the sizes it would compute as <= 0."""
    n = out_size(padding, size, k, stride, dilation)
    if n <= 0 and size > 0:
        raise Invalid(f"the {what} window ({(k - 1) * dilation + 1}) is larger than the input ({size}) with VALID "
                      "padding")
    return max(n, 0)


def _spatial(v: OpView, kh: int, kw: int, dilated: bool = True) -> tuple[int, int]:
    _, h, w, _ = v.shape(0)
    dh, dw = (int(v.opt("dilation_h_factor")), int(v.opt("dilation_w_factor"))) if dilated else (1, 1)
    padding, sh, sw = int(v.opt("padding")), int(v.opt("stride_h")), int(v.opt("stride_w"))
    return (window_out_size(padding, h, kh, sh, dh, "filter height"),
            window_out_size(padding, w, kw, sw, dw, "filter width"))


def conv_shape(v: OpView) -> list[tuple[int, ...]]:
    b, _, _, c = v.shape(0)
    o, kh, kw, i = v.shape(1)
    if i <= 0 or c % i:
        raise Invalid(f"input has {c} channels, the filter {i}: the input's must be a multiple (groups)")
    if o % (c // i):
        raise Invalid(f"{o} output channels do not split into {c // i} groups")
    oh, ow = _spatial(v, kh, kw)
    return [(b, oh, ow, o)]


def depthwise_shape(v: OpView) -> list[tuple[int, ...]]:
    b, _, _, c = v.shape(0)
    one, kh, kw, o = v.shape(1)
    if one != 1:
        raise Invalid(f"filter shape {v.shape(1)} must be [1, KH, KW, O]")
    if c <= 0 or o % c:
        raise Invalid(f"{o} output channels are not a multiple of the {c} input channels")
    oh, ow = _spatial(v, kh, kw)
    return [(b, oh, ow, o)]


def pool_shape(v: OpView) -> list[tuple[int, ...]]:
    b, _, _, c = v.shape(0)
    oh, ow = _spatial(v, int(v.opt("filter_height")), int(v.opt("filter_width")), dilated=False)
    return [(b, oh, ow, c)]


CONV_INPUT_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.uint8, np.int8, np.int16))
_BIAS_TYPE = {np.dtype(np.float32): np.dtype(np.float32), np.dtype(np.uint8): np.dtype(np.int32),
              np.dtype(np.int8): np.dtype(np.int32), np.dtype(np.int16): np.dtype(np.int64)}
_FILTER_TYPES = {np.dtype(np.float32): frozenset(np.dtype(t) for t in (np.float32, np.int8, np.uint8))}


def conv_types(data: int, weights: int, bias: int) -> Check:
    """LiteRT's conv-family type rules: float32 or quantized input, output of the same type, a float32 filter
    (int8/uint8 for hybrid models) or a quantized one, a bias of the input's accumulator type; and a filter
    without empty dimensions (LiteRT refuses zero output channels, a 0-size window has no meaning)."""
    def check(v: OpView) -> None:
        x = v.tensor(data)
        if x.dtype not in CONV_INPUT_TYPES:
            raise Invalid(f"input ({x.name!r}) is {x.dtype}; float32, uint8, int8 or int16 expected")
        w = v.tensor(weights)
        allowed = _FILTER_TYPES.get(x.dtype, frozenset(np.dtype(t) for t in (np.int8, np.uint8)))
        if w.dtype not in allowed:
            raise Invalid(f"filter ({w.name!r}) is {w.dtype}, which does not go with a {x.dtype} input")
        if 0 in w.shape:
            raise Invalid(f"filter ({w.name!r}) has an empty dimension: shape {w.shape}")
        if v.has(bias) and v.tensor(bias).dtype != _BIAS_TYPE[x.dtype]:
            raise Invalid(f"bias ({v.tensor(bias).name!r}) is {v.tensor(bias).dtype}, must be "
                          f"{_BIAS_TYPE[x.dtype]} for a {x.dtype} input")
    return check


def bias_size(position: int, filter_axis: int) -> Check:
    """The bias has one value per output channel (dimension filter_axis of the filter)."""
    def check(v: OpView) -> None:
        if v.has(position) and v.tensor(position).size != v.shape(1)[filter_axis]:
            raise Invalid(f"bias ({v.tensor(position).name!r}) has {v.tensor(position).size} values for "
                          f"{v.shape(1)[filter_axis]} output channels")
    return check


def fully_connected_shape(v: OpView) -> list[tuple[int, ...]] | None:
    units, depth = v.shape(1)
    if depth <= 0:
        raise Invalid(f"weights shape {v.shape(1)} has no input depth")
    x = v.shape(0)
    n = int(np.prod(x, dtype=np.int64))
    if n % depth:
        raise Invalid(f"input of {n} values ({x}) does not split into rows of {depth} (weights {v.shape(1)})")
    if v.opt("keep_num_dims"):
        if not x or x[-1] != depth:
            raise Invalid(f"keep_num_dims: the input's last dimension ({x}) must be the weights' depth {depth}")
        return [(*x[:-1], units)]
    if len(v.out_shape()) != 2:  # LiteRT writes [batch, units]; converters also declare other ranks of it
        return None if int(np.prod(v.out_shape(), dtype=np.int64)) == n // depth * units else [(n // depth, units)]
    return [(n // depth, units)]


def batch_matmul_shape(v: OpView) -> list[tuple[int, ...]]:
    a, b = v.shape(0), v.shape(1)
    if len(a) < 2 or len(b) < 2:
        raise Invalid(f"operands of shapes {a} and {b} need rank >= 2")
    rows, inner_a = (a[-1], a[-2]) if v.opt("adj_x") else (a[-2], a[-1])
    inner_b, cols = (b[-1], b[-2]) if v.opt("adj_y") else (b[-2], b[-1])
    if inner_a != inner_b:
        raise Invalid(f"contracted dimensions differ: {inner_a} ({a}) and {inner_b} ({b})")
    return [(*_broadcast(a[:-2], b[:-2]), rows, cols)]


def transpose_conv_shape(v: OpView) -> list[tuple[int, ...]] | None:
    shape = v.ints(0)
    if shape is None:
        return None
    if len(shape) != 4 or min(shape) < 0:
        raise Invalid(f"output_shape {shape} must be 4 sizes >= 0")
    o, kh, kw, i = v.shape(1)
    b, h, w, c = v.shape(2)
    if c != i or shape[3] != o or shape[0] != b:
        raise Invalid(f"input {v.shape(2)}, filter {v.shape(1)} and output_shape {shape} do not agree")
    _check_transposed(v, h, w, shape[1], shape[2], kh, kw)
    return [tuple(shape)]


def _check_transposed(v: OpView, h: int, w: int, oh: int, ow: int, kh: int, kw: int,
                      padding: int | None = None, sh: int | None = None, sw: int | None = None) -> None:
    """The input must be what a forward conv of the output would produce (as TensorFlow requires)."""
    padding = int(v.opt("padding")) if padding is None else padding
    sh = int(v.opt("stride_h")) if sh is None else sh
    sw = int(v.opt("stride_w")) if sw is None else sw
    want = (window_out_size(padding, oh, kh, sh, 1, "filter height"),
            window_out_size(padding, ow, kw, sw, 1, "filter width"))
    if (h, w) != want:
        raise Invalid(f"input spatial size {(h, w)} is not what output size {(oh, ow)} gives with filter "
                      f"{(kh, kw)}, strides {(sh, sw)} and padding {'SAME' if padding == SAME else 'VALID'} "
                      f"({want})")


def concat_shape(v: OpView) -> list[tuple[int, ...]]:
    shapes = [v.shape(i) for i in range(v.n_in)]
    rank = len(shapes[0])
    axis = v.axis(int(v.opt("axis")), rank)
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for d, (a, b) in enumerate(zip(s, shapes[0])) if d != axis):
            raise Invalid(f"input shapes {shapes} differ outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [tuple(out)]


def pack_shape(v: OpView) -> list[tuple[int, ...]]:
    shapes = {v.shape(i) for i in range(v.n_in)}
    if len(shapes) != 1:
        raise Invalid(f"inputs have different shapes {sorted(shapes)}")
    if int(v.opt("values_count")) != v.n_in:
        raise Invalid(f"values_count is {v.opt('values_count')} for {v.n_in} inputs")
    shape = v.shape(0)
    axis = v.axis(int(v.opt("axis")), len(shape) + 1)
    return [(*shape[:axis], v.n_in, *shape[axis:])]


def unpack_shape(v: OpView) -> list[tuple[int, ...]]:
    shape = v.shape(0)
    axis = v.axis(int(v.opt("axis")), len(shape))
    if shape[axis] != len(v.op.outputs) or int(v.opt("num")) not in (0, shape[axis]):
        raise Invalid(f"unpacking axis {axis} of {shape} gives {shape[axis]} outputs; the op has "
                      f"{len(v.op.outputs)} (num {v.opt('num')})")
    return [shape[:axis] + shape[axis + 1:]] * shape[axis]


def split_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axis_values = v.ints(0)
    n = int(v.opt("num_splits"))
    if n != len(v.op.outputs):
        raise Invalid(f"num_splits is {n} for {len(v.op.outputs)} outputs")
    if axis_values is None:
        return None
    if len(axis_values) != 1:
        raise Invalid(f"axis must be one value, got {axis_values}")
    shape = v.shape(1)
    axis = v.axis(axis_values[0], len(shape))
    if shape[axis] % n:
        raise Invalid(f"dimension {axis} of {shape} does not split into {n} equal parts")
    out = list(shape)
    out[axis] //= n
    return [tuple(out)] * n


def split_v_shape(v: OpView) -> list[tuple[int, ...]] | None:
    sizes, axis_values = v.ints(1), v.ints(2)
    n = int(v.opt("num_splits"))
    if n != len(v.op.outputs):
        raise Invalid(f"num_splits is {n} for {len(v.op.outputs)} outputs")
    if sizes is None or axis_values is None:
        return None
    shape = v.shape(0)
    if len(axis_values) != 1:
        raise Invalid(f"axis must be one value, got {axis_values}")
    axis = v.axis(axis_values[0], len(shape))
    if len(sizes) != n or sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise Invalid(f"size_splits {sizes} must be {n} sizes >= 0 (one may be -1)")
    known = sum(s for s in sizes if s >= 0)
    if (-1 in sizes and known > shape[axis]) or (-1 not in sizes and known != shape[axis]):
        raise Invalid(f"size_splits {sizes} do not add up to dimension {axis} of {shape}")
    outs = []
    for s in sizes:
        out = list(shape)
        out[axis] = s if s >= 0 else shape[axis] - known
        outs.append(tuple(out))
    return outs


def slice_shape(v: OpView) -> list[tuple[int, ...]] | None:
    begin, size = v.ints(1), v.ints(2)
    shape = v.shape(0)
    for name, i in (("begin", 1), ("size", 2)):
        if v.rank(i) != 1 or v.shape(i)[0] != len(shape):
            raise Invalid(f"{name} has shape {v.shape(i)}, must hold one value per input dimension ({len(shape)})")
    if begin is None or size is None:
        return None
    out = []
    for d, (b, n, dim) in enumerate(zip(begin, size, shape)):
        n = dim - b if n == -1 else n
        if b < 0 or n < 0 or b + n > dim:
            raise Invalid(f"begin {begin} and size {size} leave dimension {d} of {shape}")
        out.append(n)
    return [tuple(out)]


def strided_slice_checks(v: OpView) -> None:
    n = v.shape(1)[0] if v.rank(1) == 1 else -1
    for i, name in ((1, "begin"), (2, "end"), (3, "strides")):
        if v.rank(i) != 1 or v.shape(i)[0] != n:
            raise Invalid(f"begin, end and strides must be vectors of one length; {name} has shape {v.shape(i)}")
    if v.opt("ellipsis_mask") == 0 and v.opt("new_axis_mask") == 0 and n > v.rank(0):
        raise Invalid(f"{n} slice dimensions for an input of rank {v.rank(0)}")
    strides = v.ints(3)
    if strides is not None and 0 in strides:
        raise Invalid(f"strides {strides} contain 0")
    if v.rank(0) > 5:
        raise Invalid(f"input rank {v.rank(0)} is above 5, the most LiteRT slices")


def strided_slice_shape(v: OpView) -> list[tuple[int, ...]] | None:
    """The simple case (no ellipsis or new axis, constant begin/end/strides) computed with Python slices."""
    begin, end, strides = v.ints(1), v.ints(2), v.ints(3)
    if begin is None or end is None or strides is None or v.opt("ellipsis_mask") or v.opt("new_axis_mask"):
        return None
    shape = v.shape(0)
    out = []
    for d, dim in enumerate(shape):
        if d >= len(begin):
            out.append(dim)
            continue
        b, e, s = begin[d], end[d], strides[d]
        if v.opt("offset"):
            e = b + e
        if v.opt("shrink_axis_mask") >> d & 1:
            if not -dim <= b < dim:
                raise Invalid(f"shrunk dimension {d}: index {b} is out of range for size {dim}")
            continue
        b = None if v.opt("begin_mask") >> d & 1 else b
        e = None if v.opt("end_mask") >> d & 1 else e
        out.append(len(range(dim)[slice(b, e, s)]))
    return [tuple(out)]


def reshape_shape(v: OpView) -> list[tuple[int, ...]] | None:
    """Same number of values; a constant shape input (one -1 resolved) must be the declared output shape."""
    n_in = int(np.prod(v.shape(0), dtype=np.int64))
    n_out = int(np.prod(v.out_shape(), dtype=np.int64))
    if n_in != n_out:
        raise Invalid(f"input {v.shape(0)} has {n_in} values, output {v.out_shape()} {n_out}")
    target = v.ints(1) if v.n_in > 1 and v.rank(1) == 1 else None
    if target is None or target.count(-1) > 1 or min(target, default=0) < -1:
        return None
    known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
    if -1 in target:
        if known == 0 or n_in % known:
            raise Invalid(f"shape {target} cannot hold the input's {n_in} values")
        target = [n_in // known if d == -1 else d for d in target]
    return [tuple(target)]


def squeeze_shape(v: OpView) -> list[tuple[int, ...]]:
    shape = v.shape(0)
    dims = [v.axis(int(d), len(shape), "squeeze dimension") for d in v.opt("squeeze_dims") or []]
    if not dims:
        return [tuple(d for d in shape if d != 1)]
    for d in dims:
        if shape[d] != 1:
            raise Invalid(f"squeeze dimension {d} of {shape} is not 1")
    return [tuple(s for d, s in enumerate(shape) if d not in dims)]


def expand_dims_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axis = v.ints(1)
    if axis is None:
        return None
    if len(axis) != 1:
        raise Invalid(f"axis must be one value, got {axis}")
    shape = v.shape(0)
    a = v.axis(axis[0], len(shape) + 1)
    return [(*shape[:a], 1, *shape[a:])]


def transpose_shape(v: OpView) -> list[tuple[int, ...]] | None:
    perm = v.ints(1)
    shape = v.shape(0)
    if len(shape) > 6:
        raise Invalid(f"input rank {len(shape)} is above 6, the most LiteRT transposes")
    if perm is None:
        return None
    rank = len(shape)
    normalized = [p + rank if p < 0 else p for p in perm]
    if sorted(normalized) != list(range(rank)):
        raise Invalid(f"perm {perm} is not a permutation of the {rank} input dimensions")
    return [tuple(shape[p] for p in normalized)]


def gather_shape(v: OpView) -> list[tuple[int, ...]]:
    params, indices = v.shape(0), v.shape(1)
    axis = v.axis(int(v.opt("axis")), len(params))
    batch = int(v.opt("batch_dims"))
    batch = batch + len(indices) if batch < 0 else batch
    if not 0 <= batch <= min(axis, len(indices)) or params[:batch] != indices[:batch]:
        raise Invalid(f"batch_dims {v.opt('batch_dims')} does not fit params {params}, indices {indices}, "
                      f"axis {axis}")
    values = v.ints(1)
    if values is not None and values and (min(values) < 0 or max(values) >= params[axis]):
        raise Invalid(f"constant indices {sorted(set(values))[:8]} are out of range for dimension {axis} of "
                      f"{params}")
    return [(*params[:axis], *indices[batch:], *params[axis + 1:])]


def gather_nd_shape(v: OpView) -> list[tuple[int, ...]]:
    params, indices = v.shape(0), v.shape(1)
    if not indices or indices[-1] > len(params):
        raise Invalid(f"indices {indices} index more dimensions than params {params} has")
    return [(*indices[:-1], *params[indices[-1]:])]


def embedding_lookup_shape(v: OpView) -> list[tuple[int, ...]]:
    ids, table = v.shape(0), v.shape(1)
    if len(ids) != 1 or len(table) < 2:
        raise Invalid(f"ids {ids} must be a vector and the table {table} of rank >= 2")
    values = v.ints(0)
    if values is not None and values and (min(values) < 0 or max(values) >= table[0]):
        raise Invalid(f"constant ids are out of range for a table of {table[0]} rows")
    return [(ids[0], *table[1:])]


def pad_shape(v: OpView) -> list[tuple[int, ...]] | None:
    shape = v.shape(0)
    if v.shape(1) != (len(shape), 2):
        raise Invalid(f"paddings have shape {v.shape(1)}, must be [{len(shape)}, 2] for an input of rank "
                      f"{len(shape)}")
    pads = v.ints(1)
    if pads is None:
        return None
    if min(pads, default=0) < 0:
        raise Invalid(f"paddings {pads} contain a negative value")
    if v.op.code == "MIRROR_PAD":
        reflect = int(v.opt("mode")) == 0
        for d, dim in enumerate(shape):
            limit = dim - 1 if reflect else dim
            if max(pads[2 * d], pads[2 * d + 1]) > limit:
                raise Invalid(f"{'REFLECT' if reflect else 'SYMMETRIC'} padding {pads[2 * d:2 * d + 2]} of dimension "
                              f"{d} exceeds {limit} for size {dim}")
    return [tuple(dim + pads[2 * d] + pads[2 * d + 1] for d, dim in enumerate(shape))]


def padv2_value(v: OpView) -> None:
    if v.has(2) and v.tensor(2).size != 1:
        raise Invalid(f"constant_values has {v.tensor(2).size} values, must be one")


def reduce_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axes = v.ints(1)
    if axes is None:
        return None
    shape = v.shape(0)
    dims = {v.axis(a, len(shape)) for a in axes}
    if v.opt("keep_dims"):
        return [tuple(1 if d in dims else s for d, s in enumerate(shape))]
    return [tuple(s for d, s in enumerate(shape) if d not in dims)]


def resize_shape(v: OpView) -> list[tuple[int, ...]] | None:
    if v.shape(1) != (2,):
        raise Invalid(f"size has shape {v.shape(1)}, must be [2]")
    size = v.ints(1)
    if size is None:
        return None
    if min(size) <= 0:
        raise Invalid(f"size {size} must be positive")
    b, _, _, c = v.shape(0)
    return [(b, size[0], size[1], c)]


def depth_to_space_shape(v: OpView) -> list[tuple[int, ...]]:
    b, h, w, c = v.shape(0)
    k = int(v.opt("block_size"))
    if c % (k * k):
        raise Invalid(f"{c} channels do not divide by block_size^2 = {k * k}")
    return [(b, h * k, w * k, c // (k * k))]


def space_to_depth_shape(v: OpView) -> list[tuple[int, ...]]:
    b, h, w, c = v.shape(0)
    k = int(v.opt("block_size"))
    if h % k or w % k:
        raise Invalid(f"height {h} and width {w} must be multiples of block_size {k}")
    return [(b, h // k, w // k, c * k * k)]


def _block_and_pads(v: OpView, what: str) -> tuple[list[int], list[int]] | None:
    spatial = v.rank(0) - 2
    if v.shape(1) != (spatial,) or v.shape(2) != (spatial, 2):
        raise Invalid(f"block_shape {v.shape(1)} and {what} {v.shape(2)} must be [{spatial}] and [{spatial}, 2]")
    block, pads = v.ints(1), v.ints(2)
    if block is None or pads is None:
        return None
    if min(block) < 1 or min(pads, default=0) < 0:
        raise Invalid(f"block_shape {block} must be >= 1 and {what} {pads} >= 0")
    return block, pads


def space_to_batch_shape(v: OpView) -> list[tuple[int, ...]] | None:
    got = _block_and_pads(v, "paddings")
    if got is None:
        return None
    block, pads = got
    shape = v.shape(0)
    out = [shape[0] * int(np.prod(block))]
    for d, k in enumerate(block):
        padded = shape[d + 1] + pads[2 * d] + pads[2 * d + 1]
        if padded % k:
            raise Invalid(f"padded dimension {d + 1} ({padded}) is not a multiple of block {k}")
        out.append(padded // k)
    return [(*out, *shape[len(block) + 1:])]


def batch_to_space_shape(v: OpView) -> list[tuple[int, ...]] | None:
    got = _block_and_pads(v, "crops")
    if got is None:
        return None
    block, crops = got
    shape = v.shape(0)
    n = int(np.prod(block))
    if shape[0] % n:
        raise Invalid(f"batch {shape[0]} is not a multiple of the block size {n}")
    out = [shape[0] // n]
    for d, k in enumerate(block):
        size = shape[d + 1] * k - crops[2 * d] - crops[2 * d + 1]
        if size < 0:
            raise Invalid(f"crops {crops[2 * d:2 * d + 2]} exceed dimension {d + 1} ({shape[d + 1] * k})")
        out.append(size)
    return [(*out, *shape[len(block) + 1:])]


def tile_shape(v: OpView) -> list[tuple[int, ...]] | None:
    shape = v.shape(0)
    if v.shape(1) != (len(shape),):
        raise Invalid(f"multiples have shape {v.shape(1)}, must be [{len(shape)}]")
    multiples = v.ints(1)
    if multiples is None:
        return None
    if min(multiples, default=0) < 0:
        raise Invalid(f"multiples {multiples} must be >= 0")
    return [tuple(d * m for d, m in zip(shape, multiples))]


def broadcast_to_shape(v: OpView) -> list[tuple[int, ...]] | None:
    target = v.ints(1)
    if target is None:
        return None
    if len(target) < v.rank(0) or min(target, default=0) < 0:
        raise Invalid(f"shape {target} cannot hold input {v.shape(0)}")
    got = _broadcast(v.shape(0), tuple(target))
    if got != tuple(target):
        raise Invalid(f"input {v.shape(0)} does not broadcast to {target}")
    return [tuple(target)]


def select_shape(v: OpView) -> list[tuple[int, ...]]:
    """SELECT_V2 broadcasts all three; SELECT takes x and y of one shape and a condition of that shape, a
    scalar, or a vector over x's first dimension (LiteRT's select.cc)."""
    cond, x, y = v.shape(0), v.shape(1), v.shape(2)
    if v.op.code == "SELECT_V2":
        return [_broadcast(cond, x, y)]
    if x != y:
        raise Invalid(f"x {x} and y {y} must have the same shape")
    if cond != x and cond != () and not (len(cond) == 1 and x and cond[0] == x[0]):
        raise Invalid(f"condition {cond} must have x's shape {x}, be a scalar or a vector over its first dimension")
    return [x]


def select_types(v: OpView) -> None:
    if v.tensor(0).dtype != BOOL:
        raise Invalid(f"condition ({v.tensor(0).name!r}) is {v.tensor(0).dtype}, must be bool")
    same_dtype([1, 2])(v)


def dynamic_update_slice_shape(v: OpView) -> list[tuple[int, ...]]:
    operand, update = v.shape(0), v.shape(1)
    if len(update) != len(operand) or any(u > o for u, o in zip(update, operand)):
        raise Invalid(f"update {update} does not fit in operand {operand}")
    if v.shape(2) != (len(operand),):
        raise Invalid(f"start_indices have shape {v.shape(2)}, must be [{len(operand)}]")
    return [operand]


def shape_shape(v: OpView) -> list[tuple[int, ...]]:
    return [(v.rank(0),)]


def arg_shape(v: OpView) -> list[tuple[int, ...]] | None:
    axis = v.ints(1)
    if axis is None:
        return None
    if len(axis) != 1:
        raise Invalid(f"axis must be one value, got {axis}")
    shape = v.shape(0)
    a = v.axis(axis[0], len(shape))
    return [shape[:a] + shape[a + 1:]]


def prelu_shape(v: OpView) -> list[tuple[int, ...]]:
    """alpha broadcasts to the input; the output has the input's shape (LiteRT's activations.cc)."""
    shape = _broadcast(v.shape(0), v.shape(1))
    if shape != v.shape(0):
        raise Invalid(f"alpha {v.shape(1)} does not broadcast to the input's shape {v.shape(0)}")
    return [shape]


def ranks(**limits: tuple[int, int]) -> Check:
    """ranks(in0=(4, 4), in1=(1, 1), out0=(1, 6)): allowed rank ranges by input/output position."""
    def check(v: OpView) -> None:
        for key, (low, high) in limits.items():
            k = int(key[-1])
            if key.startswith("in"):
                if not v.has(k):
                    continue
                t, what = v.tensor(k), f"input {k}"
            else:
                if k >= len(v.op.outputs):
                    continue
                t, what = v.out(k), f"output {k}"
            if not low <= len(t.shape) <= high:
                need = str(low) if low == high else f"{low}..{high}"
                raise Invalid(f"{what} ({t.name!r}) has rank {len(t.shape)} (shape {t.shape}), must be {need}")
    return check


def options_present(v: OpView) -> None:
    """Ops that call subgraphs are nothing without their options (LiteRT refuses to parse them)."""
    if v.op.options is None:
        raise Invalid(f"has no {v.options_kind} (which subgraph to run)")


# -- MediaPipe custom ops: options are raw C structs ------------------------------------------------------------
def _custom_ints(v: OpView, count: int, what: str) -> tuple[int, ...]:
    raw = v.op.custom_options or b""
    if len(raw) < 4 * count:
        raise Invalid(f"custom options of {len(raw)} bytes, expected a {what} struct (>= {4 * count} bytes)")
    return struct.unpack_from(f"<{count}i", raw)


def mp_transpose_conv(v: OpView) -> None:
    """Convolution2DTransposeBias: TfLiteTransposeConvParams {padding (1 SAME, 2 VALID), stride_w, stride_h}."""
    padding, sw, sh = _custom_ints(v, 3, "TfLiteTransposeConvParams")
    if padding not in (1, 2) or sw < 1 or sh < 1:
        raise Invalid(f"custom options: padding {padding} (1 SAME, 2 VALID), strides ({sh}, {sw}) must be >= 1")
    o, kh, kw, i = v.shape(1)
    b, h, w, c = v.shape(0)
    if c != i or v.tensor(2).size != o:
        raise Invalid(f"input {v.shape(0)}, filter {v.shape(1)} and bias {v.shape(2)} do not agree")
    ob, oh, ow, oc = v.out_shape() if len(v.out_shape()) == 4 else (0, 0, 0, 0)
    if (ob, oc) != (b, o):
        raise Invalid(f"output {v.out_shape()} does not fit input {v.shape(0)} and filter {v.shape(1)}")
    _check_transposed(v, h, w, oh, ow, kh, kw, SAME if padding == 1 else VALID, sh, sw)


def mp_pooling(v: OpView) -> None:
    """MaxPoolingWithArgmax2D / MaxUnpooling2D: TfLitePoolParams {padding, stride_w, stride_h, filter_w,
    filter_h, activation}."""
    padding, sw, sh, fw, fh, _ = _custom_ints(v, 6, "TfLitePoolParams")
    if padding not in (1, 2) or min(sw, sh, fw, fh) < 1:
        raise Invalid(f"custom options: padding {padding} (1 SAME, 2 VALID), strides ({sh}, {sw}) and filter "
                      f"({fh}, {fw}) must be >= 1")



# -- MediaPipe landmark ops: options are flexbuffer maps ------------------------------------------------------------
def _flex_map(v: OpView) -> dict[str, Any]:
    """The op's flexbuffer options map ({} when absent); a missing key reads as 0, as in MediaPipe."""
    raw = v.op.custom_options or b""
    if not raw:
        return {}
    try:
        value = flexbuffers.Loads(raw)
    except Exception as e:  # noqa: BLE001 - any undecodable flexbuffer is a malformed op
        raise Invalid(f"custom options are not a readable flexbuffer ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise Invalid(f"custom options are a flexbuffer {type(value).__name__}, expected a map")
    return value


def _flex_number(options: dict[str, Any], key: str, default: float = 0) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise Invalid(f"custom option {key} is {value!r}, expected a finite number")
    return value


def mp_float32(v: OpView) -> None:
    """MediaPipe's landmark ops read and write float32 tensors only."""
    for what, t in [*((f"input {i}", v.tensor(i)) for i in range(v.n_in)), ("output", v.out())]:
        if t.dtype != np.float32:
            raise Invalid(f"{what} ({t.name!r}) is {t.dtype}, must be float32")


def mp_landmarks_to_matrix(v: OpView) -> None:
    """Landmarks2TransformMatrix version 2 (rank-3 input): what MediaPipe's Eval refuses (negative indices, output
    size < 1, scale <= 0) and indices past the landmarks (which it would read out of bounds)."""
    options = _flex_map(v)
    if v.rank(0) != 3:
        return  # version 1: options checked by whoever runs it
    subset = options.get("subset_idxs", [])
    if not isinstance(subset, list) or not subset or not all(isinstance(i, int) for i in subset):
        raise Invalid("custom option subset_idxs must be a non-empty list of landmark indices")
    indices = [int(_flex_number(options, "left_rotation_idx")), int(_flex_number(options, "right_rotation_idx")),
               *subset]
    if min(indices) < 0 or max(indices) >= v.shape(0)[1]:
        raise Invalid(f"custom options: landmark indices {min(indices)}..{max(indices)} outside the input's "
                      f"{v.shape(0)[1]} landmarks")
    if min(_flex_number(options, "output_height"), _flex_number(options, "output_width")) < 1:
        raise Invalid("custom options: output_height and output_width must be >= 1")
    if min(_flex_number(options, "scale_x"), _flex_number(options, "scale_y")) <= 0:
        raise Invalid("custom options: scale_x and scale_y must be > 0")
    _flex_number(options, "target_rotation_radians")


def mp_transform_landmarks(v: OpView) -> None:
    """TransformLandmarks: version 2 (rank 3) transforms 2 or 3 values per landmark; version 1 (rank 4) takes
    dimensions (2 or 3, dividing the channels) and a nonzero scale from its options."""
    options = _flex_map(v)
    dims = v.shape(0)[-1] if v.rank(0) == 3 else int(_flex_number(options, "dimensions", 3))
    if dims not in (2, 3) or v.shape(0)[-1] % dims:
        raise Invalid(f"{dims} values per landmark: must be 2 or 3 and divide the last dimension {v.shape(0)[-1]}")
    if v.rank(0) == 4 and _flex_number(options, "scale", 1.0) == 0:
        raise Invalid("custom option scale is 0")


def mp_transform_tensor(v: OpView) -> None:
    """TransformTensorBilinear / TransformTensor: a readable options map; version 1 interpolates bilinearly only."""
    options = _flex_map(v)
    if v.op.code == "TransformTensor" and options.get("mode", "bilinear") != "bilinear":
        raise Invalid(f"custom option mode {options.get('mode')!r}: only bilinear exists")


# -- the table --------------------------------------------------------------------------------------------------
@dataclass
class Rule:
    """What a well-formed instance of an op looks like. inputs/outputs: allowed counts (max None: any);
    optional: input positions that may be -1; checks: run in order; shape: the expected output shapes."""

    inputs: tuple[int, int | None] = (1, 1)
    outputs: tuple[int, int | None] = (1, 1)
    optional: frozenset[int] = frozenset()
    checks: tuple[Check, ...] = ()
    shape: ShapeRule | None = None
    options: str | None = None  # the options table, when builder.options_kind does not know it
    custom: bool = False  # a custom op: options are custom_options bytes


def _r(inputs: tuple[int, int | None] | int = 1, outputs: tuple[int, int | None] | int = 1, **kw: Any) -> Rule:
    i = (inputs, inputs) if isinstance(inputs, int) else inputs
    o = (outputs, outputs) if isinstance(outputs, int) else outputs
    if "optional" in kw:
        kw["optional"] = frozenset(kw["optional"])
    if "checks" in kw:
        kw["checks"] = tuple(kw["checks"])
    return Rule(i, o, **kw)


UNARY = _r(1, 1, checks=[same_dtype([0])], shape=same_as_input)
BINARY = _r(2, 1, checks=[same_dtype([0, 1]), ACTIVATION], shape=broadcast_inputs)
COMPARE = _r(2, 1, checks=[same_dtype([0, 1], outputs=False), bool_output], shape=broadcast_inputs)
CONV_STRIDES = [at_least("stride_h", 1), at_least("stride_w", 1), PADDING, ACTIVATION]
DILATIONS = [at_least("dilation_h_factor", 1), at_least("dilation_w_factor", 1)]
POOL = _r(1, 1, checks=[ranks(in0=(4, 4)), same_dtype([0]), *CONV_STRIDES, at_least("filter_height", 1),
                        at_least("filter_width", 1)], shape=pool_shape)
REDUCE = _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=reduce_shape, options="ReducerOptions")
RESIZE = _r(2, 1, checks=[ranks(in0=(4, 4)), index_dtype(1), same_dtype([0])], shape=resize_shape)
SOFTMAX_LIKE = _r(1, 1, checks=[ranks(in0=(1, 6)), same_dtype([0])], shape=same_as_input)

RULES: dict[str, Rule] = {
    **dict.fromkeys(["ABS", "CEIL", "COS", "ELU", "EXP", "FLOOR", "GELU", "HARD_SWISH", "LOG", "LOGISTIC", "NEG",
                     "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "RSQRT", "SIN", "SQRT", "SQUARE", "TANH",
                     "ROUND", "SIGN", "LOGICAL_NOT", "ZEROS_LIKE"], UNARY),
    "LEAKY_RELU": _r(1, 1, checks=[same_dtype([0]), finite("alpha")], shape=same_as_input),
    **dict.fromkeys(["ADD", "SUB", "MUL", "DIV", "FLOOR_DIV", "FLOOR_MOD", "MAXIMUM", "MINIMUM", "POW",
                     "SQUARED_DIFFERENCE", "LOGICAL_AND", "LOGICAL_OR"], BINARY),
    **dict.fromkeys(["EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"], COMPARE),
    "PRELU": _r(2, 1, checks=[same_dtype([0, 1])], shape=prelu_shape),
    "SELECT": _r(3, 1, checks=[select_types], shape=select_shape),
    "SELECT_V2": _r(3, 1, checks=[select_types], shape=select_shape),
    # LiteRT 2.3 wants a bias; the GPU kernels take none, and the CPU fallback adds a zero one for LiteRT
    "CONV_2D": _r((2, 3), 1, optional=[2],
                  checks=[ranks(in0=(4, 4), in1=(4, 4), out0=(4, 4)), same_dtype([0]), conv_types(0, 1, 2),
                          *CONV_STRIDES, *DILATIONS, bias_size(2, 0)], shape=conv_shape),
    "DEPTHWISE_CONV_2D": _r((2, 3), 1, optional=[2],
                            checks=[ranks(in0=(4, 4), in1=(4, 4), out0=(4, 4)), same_dtype([0]),
                                    conv_types(0, 1, 2), *CONV_STRIDES, *DILATIONS, bias_size(2, 3)],
                            shape=depthwise_shape),
    "TRANSPOSE_CONV": _r((3, 4), 1, optional=[3],
                         checks=[ranks(in0=(1, 1), in1=(4, 4), in2=(4, 4)), index_dtype(0), same_dtype([2]),
                                 conv_types(2, 1, 3),
                                 at_least("stride_h", 1), at_least("stride_w", 1), PADDING, ACTIVATION,
                                 bias_size(3, 0)], shape=transpose_conv_shape),
    "Convolution2DTransposeBias": _r(3, 1, checks=[ranks(in0=(4, 4), in1=(4, 4), out0=(4, 4)), same_dtype([0]),
                                                   conv_types(0, 1, 2), mp_transpose_conv], custom=True),
    "MaxPoolingWithArgmax2D": _r(1, 2, checks=[ranks(in0=(4, 4)), mp_pooling], custom=True),
    "MaxUnpooling2D": _r(2, 1, checks=[ranks(in0=(4, 4), in1=(4, 4)), mp_pooling], custom=True),
    "Landmarks2TransformMatrix": _r(1, 1, checks=[ranks(in0=(3, 4)), mp_float32, mp_landmarks_to_matrix],
                                    shape=lambda v: [(1, 4, 4)], custom=True),
    "TransformLandmarks": _r(2, 1, checks=[ranks(in0=(3, 4)), mp_float32, mp_transform_landmarks],
                             shape=same_as_input, custom=True),
    **dict.fromkeys(["TransformTensorBilinear", "TransformTensor"],
                    _r(2, 1, checks=[ranks(in0=(4, 4), out0=(4, 4)), mp_float32, mp_transform_tensor], custom=True)),
    "FULLY_CONNECTED": _r((2, 3), 1, optional=[2],
                          checks=[ranks(in1=(2, 2)), same_dtype([0]), conv_types(0, 1, 2), ACTIVATION,
                                  one_of("weights_format", (0, 1)),
                                  bias_size(2, 0)], shape=fully_connected_shape),
    "BATCH_MATMUL": _r(2, 1, checks=[ranks(in0=(2, 5), in1=(2, 5)), same_dtype([0])], shape=batch_matmul_shape),
    "AVERAGE_POOL_2D": POOL, "MAX_POOL_2D": POOL, "L2_POOL_2D": POOL,
    "CONCATENATION": _r((1, None), 1, checks=[all_inputs_same_dtype(), ACTIVATION], shape=concat_shape),
    "PACK": _r((1, None), 1, checks=[all_inputs_same_dtype()], shape=pack_shape),
    "UNPACK": _r(1, (1, None), checks=[same_dtype([0])], shape=unpack_shape),
    "SPLIT": _r(2, (1, None), checks=[index_dtype(0), same_dtype([1])], shape=split_shape),
    "SPLIT_V": _r(3, (1, None), checks=[index_dtype(1, 2), same_dtype([0])], shape=split_v_shape),
    "SLICE": _r(3, 1, checks=[index_dtype(1, 2), same_dtype([0]), ranks(in0=(0, 5))], shape=slice_shape),
    "STRIDED_SLICE": _r(4, 1, checks=[index_dtype(1, 2, 3), same_dtype([0]), strided_slice_checks],
                        shape=strided_slice_shape),
    "TILE": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=tile_shape),
    "TRANSPOSE": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=transpose_shape),
    "RESHAPE": _r((1, 2), 1, checks=[same_dtype([0])], shape=reshape_shape),
    "SQUEEZE": _r(1, 1, checks=[same_dtype([0])], shape=squeeze_shape),
    "EXPAND_DIMS": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=expand_dims_shape),
    "GATHER": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=gather_shape),
    "GATHER_ND": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=gather_nd_shape),
    "EMBEDDING_LOOKUP": _r(2, 1, checks=[index_dtype(0)], shape=embedding_lookup_shape),
    "PAD": _r(2, 1, checks=[index_dtype(1), same_dtype([0]), ranks(in0=(0, 5))], shape=pad_shape),
    "PADV2": _r(3, 1, checks=[index_dtype(1), same_dtype([0, 2]), ranks(in0=(0, 5)), padv2_value],
                shape=pad_shape),
    "MIRROR_PAD": _r(2, 1, checks=[index_dtype(1), same_dtype([0]), one_of("mode", (0, 1), " (REFLECT, SYMMETRIC)")],
                     shape=pad_shape),
    **dict.fromkeys(["MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL"], REDUCE),
    "SOFTMAX": _r(1, 1, checks=[ranks(in0=(1, 6)), same_dtype([0]), finite("beta")], shape=same_as_input),
    "LOG_SOFTMAX": SOFTMAX_LIKE,
    "L2_NORMALIZATION": _r(1, 1, checks=[ranks(in0=(1, 6)), same_dtype([0]), ACTIVATION], shape=same_as_input),
    "RESIZE_BILINEAR": RESIZE, "RESIZE_NEAREST_NEIGHBOR": RESIZE,
    "DEPTH_TO_SPACE": _r(1, 1, checks=[ranks(in0=(4, 4)), same_dtype([0]), at_least("block_size", 1)],
                         shape=depth_to_space_shape),
    "SPACE_TO_DEPTH": _r(1, 1, checks=[ranks(in0=(4, 4)), same_dtype([0]), at_least("block_size", 1)],
                         shape=space_to_depth_shape),
    "SPACE_TO_BATCH_ND": _r(3, 1, checks=[ranks(in0=(3, 4)), index_dtype(1, 2), same_dtype([0])],
                            shape=space_to_batch_shape),
    "BATCH_TO_SPACE_ND": _r(3, 1, checks=[ranks(in0=(3, 4)), index_dtype(1, 2), same_dtype([0])],
                            shape=batch_to_space_shape),
    "BROADCAST_TO": _r(2, 1, checks=[index_dtype(1), same_dtype([0])], shape=broadcast_to_shape),
    "DYNAMIC_UPDATE_SLICE": _r(3, 1, checks=[index_dtype(2), same_dtype([0, 1])], shape=dynamic_update_slice_shape),
    "DEQUANTIZE": _r(1, 1, checks=[float_output], shape=same_as_input),
    "QUANTIZE": _r(1, 1, shape=same_as_input),
    "DENSIFY": _r(1, 1, checks=[same_dtype([0])], shape=same_as_input),
    "CAST": _r(1, 1, shape=same_as_input),
    "SHAPE": _r(1, 1, checks=[dtype_in(-1, INDEX, "int32 or int64")], shape=shape_shape),
    "ARG_MAX": _r(2, 1, checks=[index_dtype(1), dtype_in(-1, INDEX, "int32 or int64")], shape=arg_shape),
    "ARG_MIN": _r(2, 1, checks=[index_dtype(1), dtype_in(-1, INDEX, "int32 or int64")], shape=arg_shape),
}


# Builtins no GPU kernel claims and no reference model uses: their input and output counts, as LiteRT's kernels
# check them, so a malformed one is refused here rather than by LiteRT's prepare in the CPU fallback.
_ANY = frozenset(range(64))
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {
    "FILL": ((2, 2), (1, 1)), "RANGE": ((3, 3), (1, 1)), "ONE_HOT": ((4, 4), (1, 1)), "WHERE": ((1, 1), (1, 1)),
    "TOPK_V2": ((2, 2), (2, 2)), "REVERSE_V2": ((2, 2), (1, 1)), "SCATTER_ND": ((3, 3), (1, 1)),
    "RANK": ((1, 1), (1, 1)), "CUMSUM": ((2, 2), (1, 1)), "MATRIX_DIAG": ((1, 1), (1, 1)),
    "MATRIX_SET_DIAG": ((2, 2), (1, 1)), "SEGMENT_SUM": ((2, 2), (1, 1)), "UNSORTED_SEGMENT_SUM": ((3, 3), (1, 1)),
    "UNSORTED_SEGMENT_PROD": ((3, 3), (1, 1)), "UNSORTED_SEGMENT_MAX": ((3, 3), (1, 1)),
    "UNSORTED_SEGMENT_MIN": ((3, 3), (1, 1)), "BROADCAST_ARGS": ((2, 2), (1, 1)),
    "LOCAL_RESPONSE_NORMALIZATION": ((1, 1), (1, 1)), "REVERSE_SEQUENCE": ((2, 2), (1, 1)),
    "ADD_N": ((2, None), (1, 1)), "FAKE_QUANT": ((1, 1), (1, 1)), "UNIQUE": ((1, 1), (2, 2)),
    "RFFT2D": ((2, 2), (1, 1)), "COMPLEX_ABS": ((1, 1), (1, 1)), "REAL": ((1, 1), (1, 1)), "IMAG": ((1, 1), (1, 1)),
    "ATAN2": ((2, 2), (1, 1)), "BITCAST": ((1, 1), (1, 1)), "BITWISE_XOR": ((2, 2), (1, 1)),
    "RIGHT_SHIFT": ((2, 2), (1, 1)), "MULTINOMIAL": ((2, 2), (1, 1)), "RANDOM_UNIFORM": ((1, 1), (1, 1)),
    "RANDOM_STANDARD_NORMAL": ((1, 1), (1, 1)), "NON_MAX_SUPPRESSION_V4": ((5, 5), (2, 2)),
    "NON_MAX_SUPPRESSION_V5": ((6, 6), (3, 3)), "VAR_HANDLE": ((0, 0), (1, 1)), "READ_VARIABLE": ((1, 1), (1, 1)),
    "ASSIGN_VARIABLE": ((2, 2), (0, 0)), "CALL_ONCE": ((0, 0), (0, 0)),
    "BIDIRECTIONAL_SEQUENCE_RNN": ((12, 12), (1, 2)), "UNIDIRECTIONAL_SEQUENCE_RNN": ((5, 5), (1, 1)),
    "BIDIRECTIONAL_SEQUENCE_LSTM": ((48, 48), (1, 2)),
    "CONV_3D": ((2, 3), (1, 1)), "CONV_3D_TRANSPOSE": ((3, 4), (1, 1)), "LSH_PROJECTION": ((2, 3), (1, 1)),
}
for _code, (_ins, _outs) in COUNTS.items():
    RULES.setdefault(_code, Rule(_ins, _outs, optional=_ANY))
RULES["SKIP_GRAM"] = Rule((1, 1), (1, 1), checks=(dtype_in(0, frozenset({np.dtype(object)}), "a string"),))
# Subgraph calls: arity and references are checked against the callee in _check_calls.
RULES["CALL_ONCE"] = Rule((0, 0), (0, 0), checks=(options_present,), options="CallOnceOptions")
RULES["WHILE"] = Rule((1, None), (1, None), optional=_ANY, checks=(options_present,), options="WhileOptions")
RULES["IF"] = Rule((1, None), (0, None), optional=_ANY, checks=(options_present,), options="IfOptions")
RULES["STABLEHLO_COMPOSITE"] = Rule((0, None), (1, None), optional=_ANY, checks=(options_present,),
                                    options="StableHLOCompositeOptions")


# Element types LiteRT 2.3.0 runs, per op (of its data input: x, the params of a gather, the values of a select):
# probed with a one-op model per type, through prepare and invoke; "*" is any. Strings (s) and complex64 (c64)
# were not probed: they are listed where LiteRT's kernels have a case for them (gather, equality, MUL). The second
# set: the types that need quantization parameters (without them LiteRT refuses the op or aborts the process:
# int8 ADD, comparisons).
_SHORT = {"s": np.object_, "c64": np.complex64, "b": np.bool_, "f16": np.float16, "f32": np.float32,
          "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
          "u16": np.uint16, "u32": np.uint32}
_TYPES_TEXT: dict[str, tuple[str, str]] = {
    "ABS": ("f16 f32 i16 i32 i8", "i8"), "CEIL": ("f16 f32", ""), "COS": ("f16 f32", ""), "ELU": ("f16 f32 i8", ""),
    "EXP": ("f16 f32 i16 i8", ""), "FLOOR": ("f16 f32", ""), "GELU": ("f16 f32 i16 i8 u8", ""),
    "HARD_SWISH": ("f16 f32 i8 u8", ""), "LOG": ("f16 f32 i16 i8", "i16 i8"),
    "LOGISTIC": ("f16 f32 i16 i8 u8", "i8 u8"), "NEG": ("f16 f32 i16 i32 i64 i8", ""),
    "RELU": ("f16 f32 i16 i8 u8", ""), "RELU6": ("f16 f32 i16 i8 u8", ""), "RELU_0_TO_1": ("f32 i8 u8", ""),
    "RELU_N1_TO_1": ("f16 f32 i8 u8", ""), "RSQRT": ("f16 f32 i16 i8", "i16 i8"), "SIN": ("f16 f32", ""),
    "SQRT": ("f16 f32 i16 i8", "i16 i8"), "SQUARE": ("f16 f32", ""), "TANH": ("f16 f32 i16 i8 u8", ""),
    "ROUND": ("f16 f32", ""), "SIGN": ("f32 f64 i32", ""), "LOGICAL_NOT": ("b", ""), "ZEROS_LIKE": ("f32 i32 i64", ""),
    "SOFTMAX": ("f16 f32 i16 i8 u8", ""), "LOG_SOFTMAX": ("f32 i8 u8", ""), "L2_NORMALIZATION": ("f32 i8 u8", ""),
    "LEAKY_RELU": ("f16 f32 i16 i8 u8", ""), "ADD": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "SUB": ("f16 f32 i16 i32 i64 i8 u8", "i16 i8 u8"), "MUL": ("c64 f16 f32 i16 i32 i64 i8 u32 u8", ""),
    "DIV": ("f16 f32 i16 i32 i8 u8", ""), "FLOOR_DIV": ("f32 i16 i32 i8", ""), "FLOOR_MOD": ("f32 i16 i32 i64 i8", ""),
    "MAXIMUM": ("f16 f32 i16 i32 i64 i8 u8", ""), "MINIMUM": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "POW": ("f32 i32", ""), "SQUARED_DIFFERENCE": ("f16 f32 i32 i8", "i8"), "LOGICAL_AND": ("b", ""),
    "LOGICAL_OR": ("b", ""), "PRELU": ("f32 i16 i8 u8", ""), "EQUAL": ("s b f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "NOT_EQUAL": ("s b f16 f32 i16 i32 i64 i8 u8", "i8 u8"), "GREATER": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "GREATER_EQUAL": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"), "LESS": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"),
    "LESS_EQUAL": ("f16 f32 i16 i32 i64 i8 u8", "i8 u8"), "SELECT": ("*", ""), "SELECT_V2": ("*", ""),
    "AVERAGE_POOL_2D": ("f16 f32 i16 i8 u8", ""), "MAX_POOL_2D": ("f32 i16 i8 u8", ""), "L2_POOL_2D": ("f32", ""),
    "MEAN": ("f16 f32 i16 i32 i64 i8 u8", ""), "SUM": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "REDUCE_MAX": ("f16 f32 i16 i32 i64 i8 u8", ""), "REDUCE_MIN": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "REDUCE_PROD": ("f32 i16 i32 i64 i8 u8", ""), "REDUCE_ANY": ("b", ""), "REDUCE_ALL": ("b", ""),
    "RESIZE_BILINEAR": ("f32 i16 i8 u8", ""), "RESIZE_NEAREST_NEIGHBOR": ("b f16 f32 i16 i32 i8 u16 u32 u8", ""),
    "PAD": ("b f16 f32 i16 i32 i64 i8 u8", ""), "MIRROR_PAD": ("*", ""), "PADV2": ("b f16 f32 i16 i32 i64 i8 u8", ""),
    "CONCATENATION": ("b f16 f32 i16 i32 i64 i8 u32 u8", ""), "PACK": ("f32 i16 i32 i64 i8 u32 u8", ""),
    "UNPACK": ("b f16 f32 i16 i32 i8 u8", ""), "SPLIT": ("f16 f32 i16 i32 i64 i8 u8", ""),
    "SPLIT_V": ("f32 i16 i32 i64 i8 u8", ""), "SLICE": ("*", ""), "STRIDED_SLICE": ("*", ""), "TILE": ("*", ""),
    "TRANSPOSE": ("*", ""), "RESHAPE": ("*", ""), "SQUEEZE": ("*", ""), "EXPAND_DIMS": ("*", ""),
    "GATHER": ("s b f16 f32 i16 i32 i64 i8 u8", ""), "GATHER_ND": ("s b f16 f32 i16 i32 i64 i8 u8", ""),
    "DEPTH_TO_SPACE": ("f16 f32 i32 i64 i8 u8", ""), "SPACE_TO_DEPTH": ("f32 i32 i64 i8 u8", ""),
    "SPACE_TO_BATCH_ND": ("*", ""), "BATCH_TO_SPACE_ND": ("*", ""), "DYNAMIC_UPDATE_SLICE": ("*", ""),
    "BATCH_MATMUL": ("f16 f32 i16 i8 u8", ""), "EMBEDDING_LOOKUP": ("*", ""), "CUMSUM": ("f32 i32 i64", ""),
    "REVERSE_V2": ("b f16 f32 i16 i32 i64 i8 u8", ""), "ARG_MAX": ("b f32 i32 i8 u8", ""),
    "ARG_MIN": ("b f32 i32 i8 u8", ""), "DEQUANTIZE": ("f16 i16 i8 u8", ""),
}
_HANDLE_TYPES = {13: "RESOURCE", 14: "VARIANT"}  # TensorType codes of handles
_DATA_INPUT = {"SELECT": 1, "SELECT_V2": 1, "EMBEDDING_LOOKUP": 1, "SPLIT": 1}


def _types(text: str) -> frozenset | None:
    return None if text == "*" else frozenset(np.dtype(_SHORT[t]) for t in text.split())


ELEMENT_TYPES: dict[str, tuple[frozenset | None, frozenset]] = {
    code: (_types(allowed), _types(quantized) or frozenset()) for code, (allowed, quantized) in _TYPES_TEXT.items()}


def check_element_types(v: OpView) -> None:
    allowed, needs_quantization = ELEMENT_TYPES[v.op.code]
    position = _DATA_INPUT.get(v.op.code, 0)
    if v.has(position) and v.tensor(position).type_code in _HANDLE_TYPES:  # read as uint8 bytes: never data
        t = v.tensor(position)
        raise Invalid(f"input {position} ({t.name!r}) is a {_HANDLE_TYPES[t.type_code]} tensor, not data")
    if v.has(position) and allowed is not None and v.tensor(position).dtype not in allowed:
        t = v.tensor(position)
        raise Invalid(f"input {position} ({t.name!r}) is {t.dtype}; LiteRT runs {v.op.code} on "
                      f"{', '.join(sorted(str(d) for d in allowed))}")
    for what, t in [*((f"input {i}", v.tensor(i)) for i in range(v.n_in) if v.has(i)),
                    *((f"output {k}", v.out(k)) for k in range(len(v.op.outputs)))]:
        if t.dtype in needs_quantization and (t.quantization is None or not (
                t.quantization.scale.size or t.quantization.blockwise)):
            raise Invalid(f"{what} ({t.name!r}) is {t.dtype} without quantization parameters")


for _code in ELEMENT_TYPES:
    if _code in RULES:
        RULES[_code] = dataclasses.replace(RULES[_code], checks=(check_element_types, *RULES[_code].checks))


# -- validation -----------------------------------------------------------------------------------------------------
def validate_model(model: Model) -> None:
    """Every subgraph, and the references between them; raises ModelError naming the first problem."""
    for g, graph in enumerate(model.subgraphs):
        validate_graph(graph, g, model)
    _check_calls(model)


def validate_graph(graph: Graph, subgraph: int = 0, model: Model | None = None) -> None:
    """One subgraph: dataflow, each op against its rule (generic checks for ops without one), then memory."""
    prefix = f"subgraph {subgraph} " if subgraph else ""
    _check_dataflow(graph, prefix)
    n_sub = len(model.subgraphs) if model is not None else None
    for pos, op in enumerate(graph.ops):
        try:
            _check_op(op, graph, subgraph, n_sub)
        except Invalid as e:
            raise ModelError(f"{prefix}op {pos} ({op.code}): {e}") from None
        except (IndexError, ValueError, TypeError, OverflowError, ZeroDivisionError) as e:
            raise ModelError(f"{prefix}op {pos} ({op.code}): malformed ({type(e).__name__}: {e})") from None
    check_memory(graph, prefix)


def _check_dataflow(graph: Graph, prefix: str) -> None:
    """Reads before writes, one writer per tensor, no writes to constants or graph inputs, outputs written."""
    tensors = graph.tensors
    producer: dict[int, int] = {}
    for pos, op in enumerate(graph.ops):
        for t in op.outputs:
            if t in producer:
                raise ModelError(f"{prefix}op {pos} ({op.code}): output tensor {t} ({tensors[t].name!r}) is also "
                                 f"written by op {producer[t]}")
            producer[t] = pos
    inputs = set(graph.inputs)
    for pos, op in enumerate(graph.ops):
        where = f"{prefix}op {pos} ({op.code})"
        for k, t in enumerate(op.inputs):
            if t < 0:
                continue
            tensor = tensors[t]
            if tensor.data is not None or tensor.is_variable or t in inputs:
                continue
            if t not in producer:
                raise ModelError(f"{where}: input {k} (tensor {t} {tensor.name!r}) is never written: it is not a "
                                 "constant, a graph input or an op's output")
            if producer[t] >= pos:
                raise ModelError(f"{where}: input {k} (tensor {t} {tensor.name!r}) is written by op {producer[t]}, "
                                 "which runs later (ops must be in execution order)")
        for t in op.outputs:
            tensor = tensors[t]
            if tensor.data is not None:
                raise ModelError(f"{where}: writes tensor {t} ({tensor.name!r}), which is a constant")
            if t in inputs:
                raise ModelError(f"{where}: writes tensor {t} ({tensor.name!r}), which is a graph input")
    for t in graph.outputs:
        tensor = tensors[t]
        if t not in producer and t not in inputs and tensor.data is None and not tensor.is_variable:
            raise ModelError(f"{prefix}graph output tensor {t} ({tensor.name!r}) is never written")


def _dynamic(t: Tensor) -> bool:
    return t.shape_signature is not None and any(d < 0 for d in t.shape_signature)


def _check_op(op: Op, graph: Graph, subgraph: int, n_sub: int | None) -> None:
    rule = RULES.get(op.code)
    if rule is not None and rule.custom != op.is_custom:
        rule = None  # a custom op named like a builtin (or the reverse): only the generic checks apply
    if op.options is not None:
        for name, value in op.options.fields.items():
            if name.endswith("subgraph_index") and value is not None and n_sub is not None:
                if not 0 <= int(value) < n_sub:
                    raise Invalid(f"{name} {value} is out of range (the model has {n_sub} subgraphs)")
                if int(value) == subgraph:
                    raise Invalid(f"{name} {value} refers to the op's own subgraph")
    if rule is None:
        return
    low, high = rule.inputs
    if not low <= len(op.inputs) <= (high if high is not None else len(op.inputs)):
        raise Invalid(f"has {len(op.inputs)} inputs, expected {_count(rule.inputs)}")
    low, high = rule.outputs
    if not low <= len(op.outputs) <= (high if high is not None else len(op.outputs)):
        raise Invalid(f"has {len(op.outputs)} outputs, expected {_count(rule.outputs)}")
    for k, t in enumerate(op.inputs):
        if t < 0 and k not in rule.optional:
            raise Invalid(f"input {k} is omitted (-1) but required")
    kind = rule.options or (None if rule.custom else options_kind(op.code))
    if kind is not None and op.options is not None and op.options.kind != kind:
        # LiteRT would read the options as absent while the GPU kernels read these fields: refuse, not diverge
        raise Invalid(f"carries {op.options.kind}, expected {kind}")
    view = OpView(op, graph, kind)
    for check in rule.checks:
        check(view)
    if rule.shape is None:
        return
    involved = [graph.tensors[t] for t in [*op.inputs, *op.outputs] if t >= 0]
    if any(_dynamic(t) for t in involved):
        return  # placeholders until LiteRT (or resize_tensor_input) computes them
    expected = rule.shape(view)
    if expected is None:
        return
    if len(expected) != len(op.outputs):
        raise Invalid(f"has {len(op.outputs)} outputs, expected {len(expected)}")
    for k, want in enumerate(expected):
        got = view.out_shape(k)
        if tuple(got) != tuple(want):
            raise Invalid(f"output {k} (tensor {op.outputs[k]} {view.out(k).name!r}) has shape {got}, expected "
                          f"{tuple(want)} from the input shapes and options")


def _count(limits: tuple[int, int | None]) -> str:
    low, high = limits
    return str(low) if low == high else (f"at least {low}" if high is None else f"{low} to {high}")


_CALLS = {"WHILE": ("cond_subgraph_index", "body_subgraph_index"), "IF": ("then_subgraph_index",
                                                                            "else_subgraph_index"),
          "CALL_ONCE": ("init_subgraph_index",), "STABLEHLO_COMPOSITE": ("decomposition_subgraph_index",)}


def _check_calls(model: Model) -> None:
    """Subgraphs called by control-flow and composite ops: arity that fits, and no subgraph calling itself
    through others (LiteRT would recurse until the stack runs out)."""
    calls: dict[int, set[int]] = {}
    for g, graph in enumerate(model.subgraphs):
        for pos, op in enumerate(graph.ops):
            for name in _CALLS.get(op.code, ()):
                value = op.opt(name)
                if value is None:
                    continue
                callee = model.subgraphs[int(value)]
                calls.setdefault(g, set()).add(int(value))
                where = f"{'subgraph ' + str(g) + ' ' if g else ''}op {pos} ({op.code})"
                ins = len(op.inputs) - (1 if op.code == "IF" else 0)
                outs = len(op.outputs)
                if name == "cond_subgraph_index":
                    outs = 1
                if name == "init_subgraph_index":
                    ins = outs = 0
                if len(callee.inputs) != ins or len(callee.outputs) != outs:
                    raise ModelError(f"{where}: {name} {value} takes {len(callee.inputs)} inputs and gives "
                                     f"{len(callee.outputs)} outputs; the op passes {ins} and expects {outs}")
    state: dict[int, int] = {}

    def visit(g: int, path: list[int]) -> None:
        state[g] = 1
        for callee in sorted(calls.get(g, ())):
            if state.get(callee) == 1:
                cycle = " -> ".join(str(x) for x in [*path, g, callee])
                raise ModelError(f"subgraphs call each other in a cycle: {cycle}")
            if callee not in state:
                visit(callee, [*path, g])
        state[g] = 2

    for g in sorted(calls):
        if g not in state:
            visit(g, [])


# -- memory --------------------------------------------------------------------------------------------------------
def available_bytes() -> int:
    """What this process can still allocate: physical memory, or less under an address-space limit."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 1 << 40
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return physical
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        mapped = 0
    return max(0, min(physical, soft - mapped))


def tensor_bytes(t: Tensor) -> int:
    """Bytes of a tensor's values (8 per string reference), in float64 arithmetic so no shape overflows."""
    itemsize = 8 if t.dtype == np.dtype(object) else t.dtype.itemsize
    return int(np.prod([max(d, 0) for d in t.shape], dtype=np.float64)) * itemsize


def check_memory(graph: Graph, prefix: str = "") -> None:
    """Refuse, before anything is allocated, a graph whose non-constant tensors need more bytes than this process
    can have. LiteRT raises nothing for this at load: its allocate_tensors fails (or the process is killed) once
    the arena is allocated; we raise ModelError at construction with the bytes it would take."""
    computed = [t for t in graph.tensors if t.data is None]
    total = sum(tensor_bytes(t) for t in computed)
    limit = available_bytes()
    if computed and total > limit:
        big = max(computed, key=tensor_bytes)
        raise ModelError(f"{prefix}the model's {len(computed)} non-constant tensors would need {total:,} bytes, "
                         f"more than the {limit:,} this process can allocate; the largest is tensor {big.index} "
                         f"({big.name!r}) of shape {big.shape} {big.dtype}: {tensor_bytes(big):,} bytes")
