"""Layout ops as index maps: for every output element, which input element it copies.

A layout op (reshape, transpose, slice, concat, ...) is described once by a Python `mapping` from the output's
logical coordinates to (source, input logical coordinates). Coordinates are `Ix` values that carry both a
WGSL u32 expression (baked into the shader) and its numpy value over the whole output (evaluated at build
time). The numpy side proves the map in bounds and decides the fast paths exactly:
  * the map is the identity on PHWC4 storage -> `Alias` (no dispatch);
  * every output vec4 copies one aligned input vec4 -> vec4 loads (`c` is the slice's first channel);
  * otherwise -> per-lane f32 gathers.
One invocation writes one output vec4 (b, y, x, slice), so padding lanes are zeroed by the epilogue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ...model.ir import Graph, Op
from ...model.quantization import is_quantized
from .. import codegen
from ..layout import phwc4_elements, slices, to_bhwc, to_phwc4
from .base import Alias, Binding, Code, KernelSpec, Lowering
from .common import EXACT_TYPES, float_tensors, tensor_values

MAX_SOURCES = 7  # tensors read per dispatch: 7 + dst = 8, WebGPU's default storage-buffer limit
_CHUNK = 1 << 21  # output elements evaluated at once by the numpy side


def lanes(init: Code, lane: Code, channels: int) -> Code:
    """A copy.wgsl body setting `value` lane by lane: init, then `lane` per output channel c of the slice (those
    below `channels` where the last slice has padding lanes)."""
    if channels % 4:
        return codegen.fill("lanes_guarded.wgsl", {"INIT": init, "LANE": lane, "C": channels}, "  ")
    return codegen.fill("lanes.wgsl", {"INIT": init, "LANE": lane}, "  ")


class Ix:
    """A non-negative integer index: WGSL u32 code plus its numpy value (int64, broadcast over the output)."""

    __slots__ = ("code", "val", "k")

    def __init__(self, code: str, val: np.ndarray | int, k: int | None = None) -> None:
        self.code, self.val, self.k = code, val, k

    @staticmethod
    def const(n: int) -> Ix:
        n = int(n)
        if n < 0:
            raise ValueError(f"negative index constant {n}")
        return Ix(f"{n}u", np.int64(n), n)

    @staticmethod
    def wrap(x: Ix | int) -> Ix:
        return x if isinstance(x, Ix) else Ix.const(x)

    def __add__(self, other: Ix | int) -> Ix:
        other = Ix.wrap(other)
        if other.k == 0:
            return self
        if self.k == 0:
            return other
        if self.k is not None and other.k is not None:
            return Ix.const(self.k + other.k)
        return Ix(f"({self.code} + {other.code})", self.val + other.val)

    __radd__ = __add__

    def __sub__(self, other: Ix | int) -> Ix:
        """u32 subtraction: only meaningful where the result is >= 0 (callers guard it with a condition)."""
        other = Ix.wrap(other)
        if other.k == 0:
            return self
        if self.k is not None and other.k is not None and self.k >= other.k:
            return Ix.const(self.k - other.k)
        return Ix(f"({self.code} - {other.code})", self.val - other.val)

    def __rsub__(self, other: int) -> Ix:
        return Ix.const(other) - self

    def __mul__(self, n: int) -> Ix:
        n = int(n)
        if n == 0 or self.k == 0:
            return Ix.const(0)
        if n == 1:
            return self
        if self.k is not None:
            return Ix.const(self.k * n)
        return Ix(f"({self.code} * {n}u)", self.val * n)

    __rmul__ = __mul__

    def __floordiv__(self, n: int) -> Ix:
        n = int(n)
        if n == 1:
            return self
        if self.k is not None:
            return Ix.const(self.k // n)
        return Ix(f"({self.code} / {n}u)", self.val // n)

    def __mod__(self, n: int) -> Ix:
        n = int(n)
        if n == 1:
            return Ix.const(0)
        if self.k is not None:
            return Ix.const(self.k % n)
        return Ix(f"({self.code} % {n}u)", self.val % n)

    def __lt__(self, n: int) -> Cond:  # type: ignore[override]
        return Cond(f"({self.code} < {int(n)}u)", self.val < int(n))

    def __ge__(self, n: int) -> Cond:  # type: ignore[override]
        return Cond(f"({self.code} >= {int(n)}u)", self.val >= int(n))


@dataclass
class Cond:
    code: str
    val: np.ndarray

    def __and__(self, other: Cond) -> Cond:
        return Cond(f"({self.code} && {other.code})", np.logical_and(self.val, other.val))


def lookup(name: str, table: np.ndarray, index: Ix) -> Ix:
    """table[index], for a constant u32 table bound as `name` (GATHER's indices)."""
    idx = np.clip(np.asarray(index.val), 0, table.size - 1)
    return Ix(f"{name}[{index.code}]", table.reshape(-1).astype(np.int64)[idx])


@dataclass
class Case:
    """Output elements where `cond` holds (None: all remaining) copy source `src` at logical `coords`."""

    src: int
    coords: list[Ix]
    cond: Cond | None = None


Mapping = Callable[[list[Ix]], list[Case]]


def logical_to_bhwc(coords: list[Ix]) -> tuple[Ix, Ix, Ix, Ix]:
    """The layout.py rank rule applied to coordinates: rank<4 keeps the last axis as channels."""
    z = Ix.const(0)
    r = len(coords)
    if r == 0:
        return z, z, z, z
    if r == 1:
        return z, z, z, coords[0]
    if r == 2:
        return coords[0], z, z, coords[1]
    if r == 3:
        return coords[0], z, coords[1], coords[2]
    return coords[0], coords[1], coords[2], coords[3]


def storage_index(shape: tuple[int, ...], coords: list[Ix]) -> tuple[Ix, Ix]:
    """(float index, vec4 index of the slice) of logical `coords` in a PHWC4 tensor of `shape`."""
    _, h, w, c = to_bhwc(shape)
    b_, y_, x_, c_ = logical_to_bhwc(coords)
    vec = ((b_ * slices(c) + c_ // 4) * h + y_) * w + x_
    return vec * 4 + c_ % 4, vec


Grid = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _chunks(b: int, h: int, w: int, c: int) -> Iterator[Grid]:
    """Output BHWC coordinate grids (broadcastable) in pieces of bounded size."""
    cs = np.arange(c).reshape(1, 1, 1, c)
    xs = np.arange(w).reshape(1, 1, w, 1)
    if b * h * w * c <= _CHUNK:
        yield np.arange(b).reshape(b, 1, 1, 1), np.arange(h).reshape(1, h, 1, 1), xs, cs
        return
    rows = max(1, _CHUNK // max(1, w * c))
    for bb in range(b):
        for y0 in range(0, h, rows):
            y1 = min(h, y0 + rows)
            yield np.full((1, 1, 1, 1), bb), np.arange(y0, y1).reshape(1, y1 - y0, 1, 1), xs, cs


def output_coords(shape: tuple[int, ...], grid: tuple[np.ndarray, ...]) -> list[Ix]:
    """Logical output coordinates (in the output's own rank) as Ix over the BHWC grid."""
    b, h, w, c = to_bhwc(shape)
    names = ("ob", "oy", "ox", "c")
    bhwc = [Ix.const(0) if n == 1 else Ix(name, g) for n, name, g in zip((b, h, w, c), names, grid)]
    r = len(shape)
    return {0: [], 1: [bhwc[3]], 2: [bhwc[0], bhwc[3]], 3: [bhwc[0], bhwc[2], bhwc[3]]}.get(r, bhwc)


@dataclass
class _Analysis:
    cases: list[Case]  # from the first chunk: only the code is used
    vec4: bool
    identity: bool
    used: list[int]  # sources that some output element reads


def analyse(out_shape: tuple[int, ...], src_shapes: list[tuple[int, ...]], mapping: Mapping) -> _Analysis:
    """Evaluate the map over every output element: check it, and decide alias / vec4 / per-lane."""
    b, h, w, c = to_bhwc(out_shape)
    s = slices(c)
    vec4, identity = True, len(src_shapes) == 1
    used: set[int] = set()
    first: list[Case] | None = None
    for grid in _chunks(b, h, w, c):
        cases = mapping(output_coords(out_shape, grid))
        first = first or cases
        full = np.broadcast_shapes(*(g.shape for g in grid))
        src = np.full(full, -1, np.int64)
        idx = np.zeros(full, np.int64)
        for case in cases:
            hit = src < 0
            if case.cond is not None:
                hit = hit & np.broadcast_to(case.cond.val, full)
            if not hit.any():
                continue
            used.add(case.src)
            shape = src_shapes[case.src]
            for axis, (coord, dim) in enumerate(zip(case.coords, shape)):
                v = np.broadcast_to(coord.val, full)[hit]
                if v.size and (v.min() < 0 or v.max() >= dim):
                    raise ValueError(f"index map reads axis {axis} of source {case.src} out of range")
            if len(case.coords) != len(shape):
                raise ValueError(f"index map gives {len(case.coords)} coordinates for rank {len(shape)}")
            flat, _ = storage_index(shape, case.coords)
            src[hit] = case.src
            idx[hit] = np.broadcast_to(flat.val, full)[hit]
        if (src < 0).any():
            raise ValueError("index map leaves output elements unwritten")
        n = full[3]
        pad = (-n) % 4
        src4 = np.pad(src, ((0, 0),) * 3 + ((0, pad),), constant_values=-1).reshape(*full[:3], -1, 4)
        idx4 = np.pad(idx, ((0, 0),) * 3 + ((0, pad),)).reshape(*full[:3], -1, 4)
        valid = src4 >= 0
        lane0_src, lane0_idx = src4[..., :1], idx4[..., :1]
        vec4 = vec4 and bool(np.all(lane0_idx % 4 == 0)) and bool(np.all(
            ~valid | ((src4 == lane0_src) & (idx4 == lane0_idx + np.arange(4)))))
        if identity:
            by, yy, xx, cc = grid
            own = (((by * s + cc // 4) * h + yy) * w + xx) * 4 + cc % 4
            identity = bool(np.array_equal(idx, np.broadcast_to(own, full)))
    if identity:
        identity = phwc4_elements(out_shape) == phwc4_elements(src_shapes[0])
    return _Analysis(first or [], vec4, identity, sorted(used))


def _assign(case: Case, name: str, shape: tuple[int, ...], vec4: bool) -> str:
    flat, vec = storage_index(shape, case.coords)
    return f"value = vec4<f32>({name}[{vec.code}]);" if vec4 else f"value[l] = f32({name}[{flat.code}]);"


def _select(cases: list[Case], names: dict[int, str], shapes: list[tuple[int, ...]], vec4: bool,
            exhaustive: bool) -> str:
    """if / else-if chain over the cases; with `exhaustive`, the last case needs no test."""
    lines = []
    for i, case in enumerate(cases):
        stmt = _assign(case, names[case.src], shapes[case.src], vec4)
        last = i == len(cases) - 1
        if case.cond is None or (last and exhaustive):
            lines.append(stmt if i == 0 else f"else {{ {stmt} }}")
            break
        lines.append(f"{'else ' if i else ''}if {case.cond.code} {{ {stmt} }}")
    return "\n    ".join(lines)


def _source_binding(graph: Graph, t: int, name: str, element: str) -> Binding:
    tensor = graph.tensors[t]
    if tensor.data is not None:
        data = to_phwc4(tensor_values(tensor).reshape(tensor.shape))
        return Binding(name, data=data, element=element)
    return Binding(name, tensor=t, element=element)


def build_gather(op: Op, graph: Graph, out_t: int, sources: list[int], mapping: Mapping, *,
                 epilogue: list[Code] | None = None, tables: dict[str, np.ndarray] | None = None,
                 allow_alias: bool = True) -> Lowering:
    """Specs computing tensor out_t = mapping(sources): an Alias, or one or more dispatches of copy.wgsl.

    More than MAX_SOURCES distinct tensors are split over several dispatches; later ones start from the
    output written so far, and only the last applies the epilogue (so fused activations apply once).
    """
    out_shape = graph.tensors[out_t].shape
    shapes = [graph.tensors[t].shape for t in sources]
    info = analyse(out_shape, shapes, mapping)
    src0 = sources[info.used[0]] if info.used else -1
    if allow_alias and info.identity and not epilogue and src0 >= 0 and graph.tensors[src0].data is None:
        return [Alias(out_t, src0)]
    b, h, w, c = to_bhwc(out_shape)
    s = slices(c)
    element = "S4" if info.vec4 else "S1"
    tables = tables or {}
    # Distinct tensors get one binding each; sources naming the same tensor share it.
    tensor_of = {i: sources[i] for i in info.used}
    groups: list[list[int]] = []
    for t in dict.fromkeys(tensor_of.values()):
        if not groups or len(groups[-1]) >= MAX_SOURCES - len(tables):
            groups.append([])
        groups[-1].append(t)
    specs: Lowering = []
    for g, group in enumerate(groups):
        names = {t: f"src{k}" for k, t in enumerate(group)}
        bindings = [_source_binding(graph, t, name, element) for t, name in names.items()]
        bindings += [Binding(name, data=np.ascontiguousarray(arr, np.uint32).reshape(-1), element="u32")
                     for name, arr in tables.items()]
        cases = [case for case in info.cases if case.src in tensor_of and tensor_of[case.src] in names]
        by_src = {i: names[tensor_of[i]] for i in tensor_of if tensor_of[i] in names}
        select = _select(cases, by_src, shapes, info.vec4, exhaustive=len(groups) == 1)
        init = "vec4<f32>(dst[oi])" if g else "vec4<f32>(0.0)"
        if info.vec4:
            body = codegen.fill("copy/vec4.wgsl", {"INIT": Code(init), "SELECT": Code(select)}, "  ")
        else:
            body = lanes(Code(init), Code(select), c)
        last = g == len(groups) - 1
        part = f" part {g + 1}/{len(groups)}" if len(groups) > 1 else ""
        specs.append(KernelSpec(
            "copy", {"S": s, "H": h, "W": w, "BODY": body},
            [*bindings, Binding("dst", tensor=out_t, writable=True)], grid=(w, h, b * s),
            epilogue=list(epilogue or []) if last else [], out_channels=c,
            label=f"{op.code}{' (vec4)' if info.vec4 else ''}{part}",
        ))
    return specs


# -- shared support checks -------------------------------------------------------------------------------


def const_ints(graph: Graph, t: int) -> list[int] | None:
    """A constant integer tensor's values, or None when it is not a constant."""
    if t < 0 or graph.tensors[t].data is None:
        return None
    return [int(v) for v in np.asarray(graph.tensors[t].data).reshape(-1)]


def check_data(op: Op, graph: Graph, data_inputs: list[int]) -> str | None:
    """The tensors that move must be float32 (constants too) with rank <= 4; other inputs must be constant. A copy
    moves int32 / bool values exactly too (kernels/common.py EXACT_TYPES) when every data tensor has one dtype."""
    data = [op.inputs[i] for i in data_inputs if i < len(op.inputs) and op.inputs[i] >= 0]
    dtypes = {graph.tensors[t].dtype for t in [*data, *op.outputs]}
    if len(dtypes) == 1 and next(iter(dtypes)) in EXACT_TYPES \
            and all(graph.tensors[t].quantization is None for t in [*data, *op.outputs]):
        reason = float_tensors(op, graph, data_inputs, integers=True)
        if reason:
            return reason
        for i, t in enumerate(op.inputs):
            if t >= 0 and i not in data_inputs and graph.tensors[t].data is None:
                return f"input {i} ({graph.tensors[t].name!r}) must be a constant"
        return None
    reason = float_tensors(op, graph, data_inputs)
    if reason:
        return reason
    for i, t in enumerate(op.inputs):
        if t < 0:
            continue
        tensor = graph.tensors[t]
        if i in data_inputs:
            if tensor.data is not None and tensor.dtype != np.float32 and tensor.quantization is None:
                return f"constant data input {tensor.name!r} is {tensor.dtype}, not float32"
        elif tensor.data is None:
            return f"input {i} ({tensor.name!r}) must be a constant"
    for t in [*[op.inputs[i] for i in data_inputs if i < len(op.inputs)], *op.outputs]:
        if t >= 0 and graph.tensors[t].size == 0:
            return f"tensor {graph.tensors[t].name!r} is empty"
    for t in op.outputs:
        if graph.tensors[t].dtype != np.float32 and not is_quantized(graph.tensors[t]):
            return f"output {graph.tensors[t].name!r} is {graph.tensors[t].dtype}, not float32"
    return None


def norm_axis(axis: int, rank: int) -> int | None:
    """axis in [-rank, rank) -> [0, rank); None when out of range."""
    if not -rank <= axis < rank:
        return None
    return axis % rank if rank else 0
