"""Reductions over constant axes: MEAN, SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD (keep_dims or not, rank 0-4).

Both the input and the output live in PHWC4 under the rank mapping of layout.py, and dropping axes
(keep_dims=false) can move an axis from one BHWC slot to another (reducing C of (B, H, W, C) leaves (B, H, W),
whose W is then the channel axis). So each kernel gets a generated `load(ob, oy, ox, os, q)` that maps output
coordinates + the flattened reduced index q to input reads:
  * channel axis kept: output lanes are input lanes, one vec4 read per q;
  * channel axis reduced: q also runs over input slices; each output lane reduces its own vec4 horizontally
    (padding lanes of the last input slice masked with the reduction's identity).
One tile is one output vec4; `split` invocations may share its reduced index space (kernels/tiling.py):
global average pooling on a big GPU splits each output 32 or more ways, a CPU adapter runs it serially.
"""

from __future__ import annotations

import numpy as np

from ...model.ir import Graph, Op
from ...model.quantization import is_quantized
from .. import codegen
from ..codegen import literal
from ..layout import slices, to_bhwc
from . import tiling
from .base import Binding, Code, Decomposition, KernelSpec, Lowering, Variants
from .common import float_tensors, integer_requant, quantize_multiplier
from .prologue import input_reader, prologue_reason

FLT_MAX = 3.4028234663852886e38
# op -> (identity, vec4 combine of a and b, horizontal combine of v into one f32)
_REDUCERS = {
    "SUM": (0.0, "a + b", "v.x + v.y + v.z + v.w"),
    "MEAN": (0.0, "a + b", "v.x + v.y + v.z + v.w"),
    "REDUCE_PROD": (1.0, "a * b", "v.x * v.y * v.z * v.w"),
    "REDUCE_MAX": (-FLT_MAX, "max(a, b)", "max(max(v.x, v.y), max(v.z, v.w))"),
    "REDUCE_MIN": (FLT_MAX, "min(a, b)", "min(min(v.x, v.y), min(v.z, v.w))"),
    # bools are 1.0 / 0.0 on the GPU (kernels/common.py EXACT_TYPES): all = min, any = max
    "REDUCE_ALL": (1.0, "min(a, b)", "min(min(v.x, v.y), min(v.z, v.w))"),
    "REDUCE_ANY": (0.0, "max(a, b)", "max(max(v.x, v.y), max(v.z, v.w))"),
}
_BOOL_REDUCERS = ("REDUCE_ALL", "REDUCE_ANY")
_INT_REDUCERS = ("REDUCE_MAX", "REDUCE_MIN", "SUM")  # exact on int32 values in f32 (|x| < 2^24)
# logical axis i of a rank-r tensor -> its BHWC slot (layout.py's rank mapping)
BHWC_SLOTS = {0: (), 1: (3,), 2: (0, 3), 3: (0, 2, 3), 4: (0, 1, 2, 3)}
_OUT_NAMES = ("ob", "oy", "ox", "oc")
_IN_NAMES = ("b", "y", "x", "c")


def normalize_axes(axes: np.ndarray, rank: int) -> list[int] | str:
    """Sorted unique non-negative axes, or why they are invalid."""
    result = set()
    for a in np.asarray(axes).reshape(-1).tolist():
        a = int(a)
        if not -rank <= a < rank:
            return f"axis {a} is out of range for rank {rank}"
        result.add(a % rank)
    return sorted(result)


def reduced_shape(shape: tuple[int, ...], axes: list[int], keep_dims: bool) -> tuple[int, ...]:
    if keep_dims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def reduce_variants(kind: str, src: int, dst: int, in_shape: tuple[int, ...], axes: list[int], keep_dims: bool,
                    epilogue: list[Code] | None = None, label: str = "",
                    reader: tuple[Code, list[Binding], str] | None = None) -> Variants:
    """One dispatch reducing tensor `src` (logical in_shape) over `axes` into `dst` (pooling reuses this);
    reader: the input's load function when it has a prologue (kernels/prologue.py)."""
    identity, combine, horizontal = _REDUCERS[kind]
    rank = len(in_shape)
    out_shape = reduced_shape(in_shape, axes, keep_dims)
    in_slots, out_slots = BHWC_SLOTS[rank], BHWC_SLOTS[len(out_shape)]
    out_axes = list(range(rank)) if keep_dims else [i for i in range(rank) if i not in axes]
    b, h, w, c = to_bhwc(in_shape)
    ob_, oh, ow, oc = to_bhwc(out_shape)
    s_in, s_out = slices(c), slices(oc)

    # Which expression gives each input BHWC coordinate: an output coordinate, a reduced index, or 0.
    coord = ["0u"] * 4
    loops: list[tuple[int, int]] = []  # (BHWC slot, extent) of the reduced axes
    for i in range(rank):
        slot = in_slots[i]
        if i in axes:
            coord[slot] = _IN_NAMES[slot]
            loops.append((slot, in_shape[i]))
        else:
            coord[slot] = _OUT_NAMES[out_slots[out_axes.index(i)]]
    channel_reduced = any(slot == 3 for slot, _ in loops)
    loops = [lp for lp in sorted(loops, reverse=True) if lp[0] != 3]  # x fastest, then y, then b
    count = int(np.prod([in_shape[i] for i in axes], dtype=np.int64)) if axes else 1

    decode, stride = [], 1
    for slot, n in loops:
        decode.append(f"  let {_IN_NAMES[slot]} = (q / {stride}u) % {n}u;")
        stride *= n
    total = stride * (s_in if channel_reduced else 1)
    index = f"(({coord[0]} * {s_in}u + {{s}}) * {h}u + {coord[1]}) * {w}u + {coord[2]}"
    read = "vec4<f32>(src[{i}])" if reader is None else f"load_src({{i}}, {coord[0]}, {{s}})"
    init = f"vec4<f32>({literal(identity)})"
    decode_lines = Code("\n".join(decode))
    if not channel_reduced:
        load = codegen.fill("reduce/load.wgsl", {"DECODE": decode_lines,
                                                 "READ": Code(read.format(i=index.format(s="os"), s="os"))})
    else:
        mask = ""
        if c % 4:
            lanes = ", ".join("true" if k < c % 4 else "false" for k in range(4))
            mask = (f"    if (s == {s_in - 1}u) {{ v = select({init}, v, vec4<bool>({lanes})); }}\n")
        load = codegen.fill("reduce/load_channels.wgsl", {
            "DECODE": decode_lines, "STRIDE": stride, "INIT": Code(init), "OC": oc, "MASK": Code(mask),
            "READ": Code(read.format(i=index.format(s="s"), s="s")), "HORIZONTAL": Code(horizontal)})
    funcs = codegen.fill("reduce/combine.wgsl", {"COMBINE": Code(combine)}) + "\n\n" + load + "\n"
    finish = f"acc / {literal(float(count))}" if kind == "MEAN" else "acc"
    fixed: dict = {"S": s_out, "H": oh, "W": ow, "R": total, "INIT": Code(init), "FUNCS": Code(funcs),
                   "FINISH": Code(finish), "OUT_PLANE": oh * ow, "OUT_LAST": ob_ - 1}
    bindings = [*(reader[1] if reader else [Binding("src", tensor=src)]), Binding("dst", tensor=dst, writable=True)]
    tiles = ob_ * s_out * oh * ow
    name = (label or kind) + (reader[2] if reader else "")

    def make(d: Decomposition) -> KernelSpec:
        shared, dispatch = tiling.split_params(d, tiles, ["acc"], "combine({a}, {b})")
        return KernelSpec("reduce", {**fixed, **shared}, bindings, grid=(tiles * d.split, 1, 1),
                          workgroup=(d.invocations_per_workgroup, 1, 1), dispatch=dispatch,
                          epilogue=list(epilogue or []), out_channels=oc, label=f"{name} [{d.describe()}]",
                          functions=[reader[0]] if reader else [])

    numbers = {k: v for k, v in fixed.items() if isinstance(v, int)}
    step = tiling.LOAD + (16 if channel_reduced else 4) + (12 if reader else 0)  # a read, combines, a prologue
    return tiling.variants("reduce", numbers, [(1, 1)], total, lambda _: tiles, lambda _: step, make,
                           int(np.prod(in_shape, dtype=np.int64)), [funcs, finish, reader[0] if reader else ""])


class ReduceKernel:
    ops = tuple(_REDUCERS)
    prologue_leaves_from = 2  # after data and axes (kernels/prologue.py)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) < 2 or (len(op.inputs) > 2 and not op.opt("prologue")) or len(op.outputs) != 1:
            return "expects 2 inputs (data, axes) and 1 output"
        dtypes = {graph.tensors[t].dtype for t in (op.inputs[0], op.outputs[0])}
        want_type = np.bool_ if op.code in _BOOL_REDUCERS else (np.int32 if np.dtype(np.int32) in dtypes else None)
        if want_type is not None and (dtypes != {np.dtype(want_type)} or (
                want_type == np.int32 and op.code not in _INT_REDUCERS)):
            return f"{op.code} of {sorted(map(str, dtypes))} (the GPU reduces bool with REDUCE_ALL/ANY, int32 with " \
                   f"{', '.join(_INT_REDUCERS)})"
        reason = float_tensors(op, graph, [0], integers=want_type is not None)
        if reason:
            return reason
        axes_t = graph.tensors[op.inputs[1]]
        if axes_t.data is None:
            return "axes are computed at run time; only constant axes run on the GPU"
        if np.dtype(axes_t.dtype) not in (np.int32, np.int64):
            return f"axes tensor is {axes_t.dtype}, expected int32/int64"
        shape = graph.tensors[op.inputs[0]].shape
        if 0 in shape:
            return "empty input tensor"
        axes = normalize_axes(axes_t.data, len(shape))
        if isinstance(axes, str):
            return axes
        want = reduced_shape(shape, axes, bool(op.opt("keep_dims", False)))
        got = graph.tensors[op.outputs[0]].shape
        if tuple(got) != want:
            return f"output shape {got} differs from the reduced shape {want}"
        return prologue_reason(op, graph, self.prologue_leaves_from) if op.opt("prologue") else None

    def build(self, op: Op, graph: Graph) -> Lowering:
        shape = graph.tensors[op.inputs[0]].shape
        axes = normalize_axes(graph.tensors[op.inputs[1]].data, len(shape))
        assert not isinstance(axes, str), axes
        keep_dims = bool(op.opt("keep_dims", False))
        reader = input_reader(op, graph) if op.opt("prologue") else None
        return [reduce_variants(op.code, op.inputs[0], op.outputs[0], shape, axes, keep_dims, reader=reader)]


    def integer_requantize(self, op: Op, graph: Graph) -> Code | None:
        """int8 MEAN as LiteRT's reference_ops::QuantizedMeanOrSum computes it: the sum of (q - zero point) times
        QuantizeMultiplier(input scale / output scale) divided (integer division) by the element count, with
        MultiplyByQuantizedMultiplier's two roundings. None for other ops and types (fake_quant rounds them)."""
        x, out = graph.tensors[op.inputs[0]], graph.tensors[op.outputs[0]]
        if op.code != "MEAN" or not (is_quantized(x) and is_quantized(out)) or x.dtype != out.dtype \
                or x.dtype != np.int8:
            return None
        axes = normalize_axes(graph.tensors[op.inputs[1]].data, len(x.shape))
        # Over H and W of a 4D tensor LiteRT takes other integer paths (its spatial Mean; an AVERAGE_POOL_2D that
        # passes/pool_to_mean made a MEAN rounds as a pool): those keep the single rounding.
        if isinstance(axes, str) or (len(x.shape) == 4 and sorted(axes) == [1, 2]):
            return None
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        in_scale = float(x.quantization.scale[0])  # type: ignore[union-attr]
        multiplier, shift = quantize_multiplier(in_scale / float(out.quantization.scale[0]))  # type: ignore[union-attr]
        extra = min(count.bit_length() - 1, 32, 31 + shift)  # QuantizedMeanOrSum folds 1/count into the multiplier
        multiplier, shift = (multiplier << extra) // count, shift - extra
        # value is the mean of real inputs: the accumulator (sum of q - zero point) is value * count / in_scale.
        return integer_requant(out, in_scale / count, multiplier, shift)


KERNEL = ReduceKernel()
