"""What every op family shares: the validation rule's machinery (Rule, OpView, the common checks and shape rules,
the element-type check), the constant folder's input readers, and the float64 reference's Node and registration.

A family module (model/families/<family>.py) holds, for its op codes, the four rules side by side: RULES (validation,
with each rule's `shape`), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS (float64
references, registered with @builtin / @custom). model/validate.py, model/shapes.py, model/folding.py and
gpuengine/reference.py run them; gpuengine/op_table.py lists them.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
from flatbuffers.table import Table

from ..builder import _schema_module
from ..dims import Dim, DimLike, is_symbolic
from ..ir import Graph, Op, Tensor
from ..ops import SAME, VALID, out_size
from ..reader import _decode_options

# -- validation rules ------------------------------------------------------------------------------------------------
FLOAT = frozenset({np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64)})


INDEX = frozenset({np.dtype(np.int32), np.dtype(np.int64)})


BOOL = np.dtype(np.bool_)


ACTIVATIONS = range(6)  # NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT


class Invalid(Exception):  # noqa: N818 - internal: what is wrong with one op, raised by a rule
    """Raised by a rule; validate_graph adds the op index and code and raises ModelError."""


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


class SymView(OpView):
    """The op as Rank and Dimension Propagation (model/symbolic.py) shows it to a rule: shapes may hold symbolic
    sizes (model/dims.py Dim), `ints` gives the values known for shape-carrying tensors (symbolic or not)."""

    def __init__(self, op: Op, graph: Graph, options_kind: str | None,
                 shapes: dict[int, tuple[DimLike, ...]], values: dict[int, list[DimLike]]) -> None:
        super().__init__(op, graph, options_kind)
        self.shapes, self.values = shapes, values

    def tensor(self, i: int) -> Tensor:
        t = self.op.inputs[i]
        base = self.graph.tensors[t]
        return dataclasses.replace(base, shape=self.shapes.get(t, tuple(base.shape)))

    def out(self, k: int = 0) -> Tensor:
        t = self.op.outputs[k]
        base = self.graph.tensors[t]
        return dataclasses.replace(base, shape=self.shapes.get(t, tuple(base.shape)))

    def ints(self, i: int) -> list[DimLike] | None:  # type: ignore[override]
        if not self.has(i):
            return None
        t = self.op.inputs[i]
        if t in self.values:
            return list(self.values[t])
        return super().ints(i)

    def value_shape(self, i: int) -> tuple[int, ...] | None:
        """Input i's shape when it is concrete (a value's layout)."""
        shape = self.shape(i)
        return None if any(is_symbolic(d) for d in shape) else tuple(int(d) for d in shape)


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


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    if any(is_symbolic(d) for s in shapes for d in s):
        return broadcast_symbolic(*shapes)
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise Invalid(f"input shapes {', '.join(str(s) for s in shapes)} do not broadcast") from None


def broadcast_symbolic(*shapes: tuple[DimLike, ...]) -> tuple[DimLike, ...]:
    """Broadcasting with symbolic sizes: 1 gives way to the other size; two different sizes, one of them symbolic,
    are taken as equal (the other is the output's; broadcast_equations says they must agree), as SoD² assumes;
    the shapes of a run are checked again concretely."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[DimLike] = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        chosen: DimLike = 1
        for d in dims:
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(chosen, int) and chosen == 1:
                chosen = d
            elif isinstance(chosen, int) and isinstance(d, int) and d != chosen:
                raise Invalid(f"input shapes {', '.join(str(s) for s in shapes)} do not broadcast")
            elif isinstance(chosen, Dim) and isinstance(d, int):
                chosen = d  # the constant is the better-known name of the same size
        out.append(chosen)
    return tuple(out)


def broadcast_equations(*shapes: tuple[DimLike, ...]) -> list[tuple[DimLike, DimLike]]:
    """The sizes broadcasting makes equal: per output position, every size that is not the constant 1."""
    rank = max((len(s) for s in shapes), default=0)
    eqs: list[tuple[DimLike, DimLike]] = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        dims = [d for d in dims if not (isinstance(d, int) and d == 1)]
        eqs += [(dims[0], d) for d in dims[1:]]
    return eqs


def binary_values(fn: Callable[[Any, Any], Any]) -> Callable[[OpView], list | None]:
    """An elementwise op's values on shape-carrying tensors (a scalar broadcast against a vector)."""
    def rule(v: OpView) -> list | None:
        a, b = v.ints(0), v.ints(1)
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        n = max(len(a), len(b))
        a, b = (a * n if len(a) == 1 else a), (b * n if len(b) == 1 else b)
        return [fn(x, y) for x, y in zip(a, b)]
    return rule


def same_values(v: OpView) -> list | None:
    """Ops that keep their input's values (RESHAPE, SQUEEZE, EXPAND_DIMS, CAST between integer types)."""
    return v.ints(0)


def dims_product(shape: Sequence[DimLike]) -> DimLike:
    """The number of elements of a shape, symbolic or not."""
    total: DimLike = 1
    for d in shape:
        total = total * d if is_symbolic(d) or is_symbolic(total) else int(total) * int(d)
    return total


def same_as_input(v: OpView) -> list[tuple[int, ...]]:
    return [v.shape(0)] * len(v.op.outputs)


def broadcast_inputs(v: OpView) -> list[tuple[int, ...]]:
    return [_broadcast(*(v.shape(i) for i in range(v.n_in) if v.has(i)))]


def window_out_size(padding: int, size: int, k: int, stride: int, dilation: int, what: str) -> int:
    """TFLite's ComputeOutSize (model/ops.py out_size), refusing the sizes it would compute as <= 0."""
    n = out_size(padding, size, k, stride, dilation)
    if is_symbolic(n):  # a symbolic size: checked when the run's sizes are known
        return n
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


def _custom_ints(v: OpView, count: int, what: str) -> tuple[int, ...]:
    raw = v.op.custom_options or b""
    if len(raw) < 4 * count:
        raise Invalid(f"custom options of {len(raw)} bytes, expected a {what} struct (>= {4 * count} bytes)")
    return struct.unpack_from(f"<{count}i", raw)


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


CONV_STRIDES = [at_least("stride_h", 1), at_least("stride_w", 1), PADDING, ACTIVATION]


# Builtins no GPU kernel claims and no reference model uses: their input and output counts, as LiteRT's kernels
# check them, so a malformed one is refused here rather than by LiteRT's prepare in the CPU fallback.
_ANY = frozenset(range(64))


# Element types LiteRT 2.3.0 runs, per op (of its data input: x, the params of a gather, the values of a select):
# probed with a one-op model per type, through prepare and invoke; "*" is any. Strings (s) and complex64 (c64)
# were not probed: they are listed where LiteRT's kernels have a case for them (gather, equality, MUL). The second
# set: the types that need quantization parameters (without them LiteRT refuses the op or aborts the process:
# int8 ADD, comparisons).
_SHORT = {"s": np.object_, "c64": np.complex64, "b": np.bool_, "f16": np.float16, "f32": np.float32,
          "f64": np.float64, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
          "u16": np.uint16, "u32": np.uint32}


_HANDLE_TYPES = {13: "RESOURCE", 14: "VARIANT"}  # TensorType codes of handles


_DATA_INPUT = {"SELECT": 1, "SELECT_V2": 1, "EMBEDDING_LOOKUP": 1, "SPLIT": 1}


def _types(text: str) -> frozenset | None:
    return None if text == "*" else frozenset(np.dtype(_SHORT[t]) for t in text.split())


ELEMENT_TYPES: dict[str, tuple[frozenset | None, frozenset]] = {}  # every family's TYPES, parsed


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


def finish_rules(rules: dict[str, Rule], counts: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]],
                 types: dict[str, tuple[str, str]]) -> None:
    """Completes a family's RULES: a counts-only rule for each op of `counts` without one, then the element-type
    check (LiteRT's types per op, `types`) first in every rule of an op it lists."""
    for code, (ins, outs) in counts.items():
        rules.setdefault(code, Rule(ins, outs, optional=_ANY))
    for code, (allowed, quantized) in types.items():
        ELEMENT_TYPES[code] = (_types(allowed), _types(quantized) or frozenset())
    for code in types:
        if code in rules:
            rules[code] = dataclasses.replace(rules[code], checks=(check_element_types, *rules[code].checks))


# -- MediaPipe custom options read by shape rules (zeros when absent: validation reports it) ---------------------------
def _custom_ints_or_zeros(v: OpView, count: int) -> tuple[int, ...]:
    return struct.unpack_from(f"<{count}i", v.op.custom_options or b"\0" * (4 * count))


# -- constant folding: reading an op's constant inputs ----------------------------------------------------------------
def _val(graph: Graph, op: Op, i: int) -> np.ndarray:
    return np.asarray(graph.tensors[op.inputs[i]].data)


def _ints(graph: Graph, op: Op, i: int) -> list[int]:
    return [int(v) for v in _val(graph, op, i).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# -- float64 references: the op as a reference function sees it, and their registration -----------------------------
F64 = np.float64


Fn = Callable[["Node"], list[np.ndarray]]


class Node:
    """One op as an op function sees it: its input values (None for omitted ones) and options."""

    def __init__(self, op: Op, graph: Graph, args: list[np.ndarray | None]) -> None:
        self.op, self.graph, self.args = op, graph, args

    def x(self, i: int = 0) -> np.ndarray:
        value = self.args[i]
        if value is None:
            raise ValueError(f"input {i} is omitted")
        return value

    def has(self, i: int) -> bool:
        return i < len(self.args) and self.args[i] is not None

    def ints(self, i: int) -> list[int]:
        return [int(v) for v in np.asarray(self.x(i)).reshape(-1)]

    def opt(self, name: str, default: Any = None) -> Any:
        value = self.op.opt(name, default)
        return default if value is None else value

    def out(self, k: int = 0) -> Tensor:
        return self.graph.tensors[self.op.outputs[k]]

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        return tuple(self.out(k).shape)

    def act(self, value: np.ndarray, code: int | None = None) -> np.ndarray:
        """The fused activation (NONE, RELU, RELU_N1_TO_1, RELU6; TANH and SIGN_BIT ignored, as LiteRT does)."""
        code = int(self.opt("fused_activation_function", 0)) if code is None else code
        bounds = {1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}.get(code)
        if bounds is None:
            return value
        low, high = bounds
        out = np.maximum(value, low)
        out = np.where(np.isnan(value), value, out if high is None else np.minimum(out, high))
        return out


def _register(table: dict[str, Fn], *codes: str) -> Callable[[Fn], Fn]:
    def wrap(fn: Fn) -> Fn:
        for code in codes:
            table[code] = fn
        return fn
    return wrap


def pad_before(size: int, k: int, stride: int, dilation: int, out: int) -> int:
    """TFLite's ComputePaddingWithOffset: the padding before the first element (the odd one goes after)."""
    return max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0) // 2


def _windows(x: np.ndarray, k: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int], padding: int,
             fill: float = 0.0) -> tuple[list[tuple[int, int, np.ndarray]], tuple[int, int]]:
    """Every tap (i, j) of a 2-D window over NHWC x, as an [N, OH, OW, C] view of the padded input."""
    _, h, w, _ = x.shape
    oh, ow = (out_size(padding, h, k[0], stride[0], dilation[0]), out_size(padding, w, k[1], stride[1], dilation[1]))
    pt, pl = pad_before(h, k[0], stride[0], dilation[0], oh), pad_before(w, k[1], stride[1], dilation[1], ow)
    pb = max(0, (oh - 1) * stride[0] + (k[0] - 1) * dilation[0] + 1 - h - pt)
    pr = max(0, (ow - 1) * stride[1] + (k[1] - 1) * dilation[1] + 1 - w - pl)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    taps = []
    for i in range(k[0]):
        for j in range(k[1]):
            y0, x0 = i * dilation[0], j * dilation[1]
            taps.append((i, j, xp[:, y0:y0 + (oh - 1) * stride[0] + 1:stride[0],
                                  x0:x0 + (ow - 1) * stride[1] + 1:stride[1], :]))
    return taps, (oh, ow)


def registrar(table: dict[str, Fn]) -> Callable[..., Callable[[Fn], Fn]]:
    """A decorator factory filing functions in table: `builtin = registrar(BUILTIN_OPS)`, then @builtin("CODE")."""
    return functools.partial(_register, table)
