"""A KV cache write (and the rotated query beside it) as the epilogue of the projection computing its rows
(option KV_EPILOGUE, set by passes/fuse_kv_write_into_projection.py): RMSNorm + QKV + RoPE + KV-cache write in one
dispatch instead of two.

The decode step's QKV projection writes one row that only a KV_CACHE_WRITE reads (its K and V rows into the caches
at the position, its Q rows rotated for the attention: kernels/kv_cache.py). Rotate-half RoPE mixes channel c of a
head with channel c + H/2, which another output slice of the projection holds; so the projection's output rows
(weights, scales, bias) are permuted at build time so that each pair of output slices a tile stores together holds
four channels (lo) and their four partners (hi). The store then hands each pair to `scatter(lo, hi, pair)`, which
rotates the lanes (cos / sin of the position, as the write computes them: kernels/rope.py rotation_tables) and
writes each value where the write would have put it: a cache element (a static index plus the clamped position
times the cache's stride along its position axis) or an element of the rotated query's PHWC4 tensor. A table
bound beside the weights (4 vec4<u32> a pair: both slices' destinations, the lanes' rotation index, group and
whether it rotates) says where, and, where the rotation's angles are the position times constant frequencies, each
lane's frequency instead of its index (one storage buffer fewer: the plan fits WebGPU's default 8 where the
decoders' plans do). The projection's own output is never written.

Only for a single-row projection (a decode step), float or hybrid int8 / int4 weights, without an activation,
where every group reads distinct channels of its output and writes at offsets from the position, rotating without a
row norm (a query / key RMS norm needs the whole head's sum, which no tile holds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...model.ir import Graph, Op, Options, Quantization, Tensor
from ...model.ops import (
    KV_CACHE_WRITE,
    KV_EPILOGUE,
    OFFSETS_FROM_POSITION,
    ROPE,
    ROPE_TABLES,
    SCATTER_PAIRS,
    VIEW_UPDATE,
    VIEW_X,
)
from ...model.quantization import INT4, int8_values, pack_int4
from ..layout import to_bhwc, to_phwc4
from .base import Binding, Code, KernelSpec, Touched, finishing_each
from .dynamic_index import _index, _source
from .index_map import Ix
from .kv_cache import KERNEL as KV_KERNEL
from .kv_cache import logical_update, writes
from .rope import angles_of, rotation_tables, table_shapes
from .wgsl_math import helpers_for

NONE = -1  # a padding lane's destination: written nowhere
EXACT = 1 << 24  # destinations are held as f32: exact below this
# the scatter table, 4 vec4<f32> a pair of slices: destinations lo, destinations hi, each lane's rotation index (or
# frequency), (group, rotates, 0, 0)
PAIR_VEC4S = 4


def split(op: Op) -> tuple[Op, Op]:
    """The projection alone (writing its own output) and the KV_CACHE_WRITE it carries."""
    fc_out, count, fields = op.opt(KV_EPILOGUE)
    own = {k: v for k, v in op.options.fields.items() if k != KV_EPILOGUE}
    fc = Op(index=op.index, code=op.code, inputs=list(op.inputs[:count]), outputs=[fc_out],
            options=Options(op.options.kind, own))
    rows = [fc_out if t < 0 else t for t in op.inputs[count:]]  # the projection's rows: -1 in the fused op
    kv = Op(index=op.index, code=KV_CACHE_WRITE, inputs=rows, outputs=list(op.outputs),
            options=Options("KvCacheWriteOptions", dict(fields)))
    return fc, kv


@dataclass
class Group:
    """One write of the epilogue: its op (kv_cache.writes), whether it rotates, and, for a cache, the tensor holding
    the position, the clamp bound and the cache's stride along the position axis."""

    op: Op
    query: bool
    rotates: bool
    position: int = -1
    limit: int = 1
    stride: int = 0


@dataclass
class Scatter:
    """The permutation of the projection's outputs and where each goes: `order[k]` is the output channel computed
    as slot k (-1: padding), `table` the scatter table (PAIR_VEC4S vec4<f32> a pair of slices, integers exact)."""

    order: np.ndarray
    table: np.ndarray
    groups: list[Group]
    tables: tuple[int, int] | None  # the (cos, sin) inputs shared by the rotating groups
    half: int  # rotated pairs a row

    @property
    def pairs(self) -> int:
        return len(self.order) // 8


def _apply_steps(values: np.ndarray, steps: tuple | None) -> np.ndarray:
    for step in steps or ():
        if step.kind == "RESHAPE":
            values = values.reshape(step.out_shape)
        elif step.kind == "SLICE":
            values = values[tuple(slice(b, b + n) for b, n in zip(step.perm, step.out_shape))]
        elif step.kind == "TRANSPOSE":
            values = values.transpose(step.perm)
        else:  # a broadcast reads a channel twice: no single destination
            raise ValueError(f"a {step.kind} view")
    return values


def _phwc4_positions(shape: tuple[int, ...]) -> np.ndarray:
    """Element index in PHWC4 storage of each element of a tensor of logical `shape` (row-major)."""
    n = int(np.prod(shape, dtype=np.int64))
    stored = to_phwc4((np.arange(n, dtype=np.float64) + 1).reshape(to_bhwc(shape)))
    where = np.zeros(n, np.int64)
    nonzero = np.flatnonzero(stored)
    where[stored[nonzero].astype(np.int64) - 1] = nonzero
    return where.reshape(shape)


def plan(op: Op, graph: Graph) -> Scatter | str:
    """The scatter of op (a projection carrying a KV_EPILOGUE), or why it cannot be one."""
    fc, kv = split(op)
    out = graph.tensors[fc.outputs[0]]
    o = int(out.shape[-1]) if out.shape else 1
    if out.size != o:
        return "the projection must compute one row (a decode step)"
    if out.size >= EXACT or any(graph.tensors[t].size >= EXACT for t in kv.outputs):
        return "tensors too large for the scatter table"
    channels = np.arange(o, dtype=np.int64).reshape(out.shape)
    groups: list[Group] = []
    lo, hi, freq, owner, rotates = [], [], [], [], []  # per quad: 4 (channel, destination) pairs each side
    tables: tuple[int, int] | None = None
    half = 0
    for g, single in enumerate(writes(kv)):
        query = single.code == ROPE
        if query:
            if len(single.inputs) != 3:
                return "a rotated query with a row norm needs the whole head's sum"
            shape = tuple(graph.tensors[single.outputs[0]].shape)
            steps, rotated, first = single.opt(VIEW_X), True, 1
        else:
            rotated = bool(single.opt(ROPE_TABLES))
            if len(single.inputs) != (5 if rotated else 3):
                return "a rotated key with a row norm needs the whole head's sum"
            shape = logical_update(single, graph)
            steps, first = single.opt(VIEW_UPDATE), 3
        try:
            logical = _apply_steps(channels, steps)
        except ValueError as e:
            return f"the write reads its rows through {e}"
        if tuple(logical.shape) != tuple(shape):
            return f"the write's view {logical.shape} is not its update {shape}"
        group = Group(single, query, rotated)
        if query:
            dest = _phwc4_positions(shape)
        else:
            cache = tuple(graph.tensors[single.inputs[0]].shape)
            offsets = single.opt(OFFSETS_FROM_POSITION)
            if offsets is None or list(offsets).count(None) != 1 or len(offsets) != len(cache):
                return "the write's offsets must come from the position"
            strides = [int(np.prod(cache[j + 1:], dtype=np.int64)) for j in range(len(cache))]
            dest = np.zeros(shape, np.int64)
            for j, (d, u, s) in enumerate(zip(cache, shape, offsets)):
                along = np.arange(u, dtype=np.int64).reshape([u if k == j else 1 for k in range(len(shape))])
                dest = dest + (along + (0 if s is None else min(max(int(s), 0), d - u))) * strides[j]
                if s is None:
                    group.position, group.limit, group.stride = single.inputs[2], d - u + 1, strides[j]
        if rotated:
            pair = (single.inputs[first], single.inputs[first + 1])
            if tables is not None and pair != tables:
                return "the rotations read different tables"
            tables = pair
            width = shape[-1]
            if width % 2 or any(d != 1 for t in table_shapes(single, graph, first) for d in t[:-1]):
                return "rotation tables must be the same for every row (a decode step's)"
            if half and half != width // 2:
                return "the rotations have different widths"
            half = width // 2
            sides = [(logical[..., :half], dest[..., :half]), (logical[..., half:], dest[..., half:])]
            index = np.broadcast_to(np.arange(half), logical[..., :half].shape).reshape(-1)
            (la, da), (lb, db) = [(c.reshape(-1), d.reshape(-1)) for c, d in sides]
        else:  # unrotated: consecutive quads pair up
            flat_c, flat_d = logical.reshape(-1), dest.reshape(-1)
            pad = -len(flat_c) % 8
            flat_c = np.concatenate([flat_c, -np.ones(pad, np.int64)])
            flat_d = np.concatenate([flat_d, np.full(pad, NONE, np.int64)])
            octets_c, octets_d = flat_c.reshape(-1, 2, 4), flat_d.reshape(-1, 2, 4)
            la, lb = octets_c[:, 0].reshape(-1), octets_c[:, 1].reshape(-1)
            da, db = octets_d[:, 0].reshape(-1), octets_d[:, 1].reshape(-1)
            index = np.zeros(len(la), np.int64)
        pad = -len(la) % 4
        la, lb = (np.concatenate([x, -np.ones(pad, np.int64)]) for x in (la, lb))
        da, db = (np.concatenate([x, np.full(pad, NONE, np.int64)]) for x in (da, db))
        index = np.concatenate([index, np.zeros(pad, np.int64)])
        lo.append(la.reshape(-1, 4))
        hi.append(lb.reshape(-1, 4))
        freq.append(index.reshape(-1, 4))
        owner += [g] * (len(la) // 4)
        rotates += [rotated] * (len(la) // 4)
        groups.append(group)
        owner_dest = (da, db)
        lo[-1] = np.stack([lo[-1], owner_dest[0].reshape(-1, 4)], axis=1)
        hi[-1] = np.stack([hi[-1], owner_dest[1].reshape(-1, 4)], axis=1)
    if len(groups) > 3:
        return "at most 3 writes"
    if not any(g.query for g in groups):
        return "the write must carry the rotated query (the projection's own output is not written)"
    lo_all, hi_all, freq_all = np.concatenate(lo), np.concatenate(hi), np.concatenate(freq)
    used = np.concatenate([lo_all[:, 0].reshape(-1), hi_all[:, 0].reshape(-1)])
    used = used[used >= 0]
    if len(np.unique(used)) != len(used):
        return "the writes read a channel of the projection twice"
    pairs = len(lo_all)
    order = np.stack([lo_all[:, 0], hi_all[:, 0]], axis=1).reshape(-1)
    table = np.zeros((pairs, 4 * PAIR_VEC4S), np.float64)
    table[:, 0:4], table[:, 4:8], table[:, 8:12] = lo_all[:, 1], hi_all[:, 1], freq_all
    table[:, 12], table[:, 13] = owner, rotates
    return Scatter(order, table.astype(np.float32), groups, tables, half)


def supports(op: Op, graph: Graph, kernel: object) -> str | None:
    """Why op (a projection carrying a KV_EPILOGUE) cannot run; None when it can."""
    if op.code != "FULLY_CONNECTED" or len(op.opt(KV_EPILOGUE) or ()) != 3:
        return f"{KV_EPILOGUE} is an option of a FULLY_CONNECTED"
    fc, kv = split(op)
    if fc.opt("gated") or int(fc.opt("fused_activation_function", 0) or 0):
        return "a projection with an activation or gating has no KV-cache epilogue"
    reason = kernel.supports(fc, graph) or KV_KERNEL.supports(kv, graph)  # type: ignore[attr-defined]
    if reason:
        return reason
    w = graph.tensors[fc.inputs[1]]
    if w.dtype != np.float32 and int8_values(w) is None:
        return "the projection's weights must be float or symmetric int8 / int4 per channel"
    if graph.tensors[fc.outputs[0]].dtype != np.float32 or graph.tensors[fc.outputs[0]].quantization:
        return "the projection's output must be float"
    found = plan(op, graph)
    return found if isinstance(found, str) else None


def _permuted(t: Tensor, order: np.ndarray, index: int) -> Tensor:
    """Tensor t's rows (axis 0) in `order` (-1: a zero row), its per-row scales and block scales alike."""
    keep = np.maximum(order, 0)
    zero = order < 0
    q = t.quantization
    if q is None:
        data = np.asarray(t.data, np.float32)[keep]
        data[zero] = 0
        return dataclasses.replace(t, index=index, shape=(len(order), *t.shape[1:]), data=data)
    values = int8_values(t)
    assert values is not None
    rows = values[keep]
    rows[zero] = 0
    scale = np.asarray(q.scale, np.float32).reshape(-1)
    if scale.size > 1:
        scale = scale[keep]
        scale[zero] = 1.0
    blocks = None
    if q.blockwise:
        blocks = np.asarray(q.block_scales)[keep]
        blocks[zero] = 0
    zero_point = np.zeros(scale.size, np.int64) if q.zero_point.size else q.zero_point
    data = pack_int4(rows) if t.type_code == INT4 else rows
    return dataclasses.replace(t, index=index, shape=(len(order), *t.shape[1:]), data=data,
                               quantization=Quantization(scale, zero_point, q.axis, None, None, q.block_size, blocks))


def derived(op: Op, graph: Graph, scatter: Scatter) -> tuple[Op, Graph]:
    """The plain projection computing its outputs in the scatter's order (weights, scales and bias permuted) into a
    stand-in output of one row, and a graph holding the permuted tensors beside the real ones."""
    fc, _ = split(op)
    n = len(graph.tensors)
    w = _permuted(graph.tensors[fc.inputs[1]], scatter.order, n)
    tensors = [*graph.tensors, w]
    bias = -1
    if len(fc.inputs) > 2 and fc.inputs[2] >= 0:
        tensors.append(_permuted(graph.tensors[fc.inputs[2]], scatter.order, len(tensors)))
        bias = len(tensors) - 1
    inputs = [fc.inputs[0], n, bias, *fc.inputs[3:]]  # a prologue's operands after the bias, as they were
    out = graph.tensors[fc.outputs[0]]
    tensors.append(dataclasses.replace(out, index=len(tensors), shape=(*out.shape[:-1], len(scatter.order))))
    plain = Op(index=op.index, code=fc.code, inputs=inputs, outputs=[len(tensors) - 1],
               options=Options(fc.options.kind, {**fc.options.fields, SCATTER_PAIRS: True}))
    return plain, Graph(tensors=tensors, ops=[plain], inputs=list(graph.inputs), outputs=list(graph.outputs),
                        name=graph.name)


def scatter_stores(values: list[list[str]]) -> list[str]:
    """The store of a tile's values[j][t] (output slice os0 + j of its single row): each pair of slices scattered."""
    return [f"scatter({values[j][0]}, {values[j + 1][0]}, (os0 + {j}u) / 2u);" for j in range(0, len(values), 2)]


def scatter_function(op: Op, graph: Graph, scatter: Scatter,
                     ) -> tuple[np.ndarray, Callable[[str, int], Code], list[Binding]]:
    """The scatter table, `fn scatter(lo, hi, pair)` given where the table lies (a vec4<f32> binding's name and the
    first vec4 of the table in it), and the other bindings it reads and writes (after the projection's own)."""
    names: dict[int, str] = {}
    bindings: list[Binding] = []

    def bind(t: int, prefix: str) -> str:
        if t not in names:
            names[t] = f"{prefix}{len(names)}"
            bindings.append(_source(graph, t, names[t]))
        return names[t]

    table = scatter.table.copy()
    shifts, puts = [], []
    for g, group in enumerate(scatter.groups):
        if group.query:
            puts.append(f"case {g}u: {{ dst[i / 4u][i % 4u] = D4(vec4<f32>(v)).x; }}")
            continue
        start = bind(group.position, "pos")
        shape = tuple(graph.tensors[group.position].shape)
        shifts.append(f"case {g}u: {{ {_index(start, shape, [Ix.const(0)], group.limit, 'p')} "
                      f"shift = p * {group.stride}u; }}")
        puts.append(f"case {g}u: {{ cache{g}[i] = v; }}")
    rotation: list[str] = []
    if scatter.tables is not None:
        rotating = next(g for g in scatter.groups if g.rotates)
        first = 1 if rotating.query else 3
        angles = angles_of(rotating.op, graph, first)
        if angles is True:  # position and constant frequencies: each lane's frequency in the table
            frequencies = np.asarray(graph.tensors[scatter.tables[1]].data, np.float32).reshape(-1)
            rotated = table[:, 13] != 0
            table[rotated, 8:12] = frequencies[table[rotated, 8:12].astype(np.int64)]
            lines = [f"let ang = turns4(vec4<f32>(f32({bind(scatter.tables[0], 'pos')}[0]) * turns[l]));",
                     "let cs = cos(ang).x;", "let sn = sin(ang).x;"]
        else:
            cos, sin = bind(scatter.tables[0], "tab"), bind(scatter.tables[1], "tab")
            shapes = table_shapes(rotating.op, graph, first)
            rows = [Ix.const(0)] * (len(shapes[1]) - 1)
            lines = ["let j = u32(turns[l]);",
                     *rotation_tables(cos, sin, shapes[0], shapes[1], rows, scatter.half, angles)]
        rotation = ["if (rotates) {", *(f"  {line}" for line in lines), "  let ra = a * cs - b * sn;",
                    "  b = b * cs + a * sn;", "  a = ra;", "}"]
    for g, group in enumerate(scatter.groups):
        if not group.query:
            cache = graph.tensors[group.op.inputs[0]]
            bindings.append(Binding(f"cache{g}", tensor=group.op.outputs[0], writable=True, raw=True, element="f32",
                                    touched=Touched(int(np.prod(logical_update(group.op, graph), dtype=np.int64)),
                                                    cache.size)))
    indent = "\n      "

    def code(name: str, base: int) -> Code:
        return Code(f"""fn scatter_put(g: u32, at: f32, shift: u32, v: f32) {{
  if (at < 0.0) {{ return; }}
  let i = u32(at) + shift;
  switch g {{
    {indent[:-2].join(puts)}
    default: {{}}
  }}
}}

fn scatter(lo: vec4<f32>, hi: vec4<f32>, pair: u32) {{
  if (pair >= {scatter.pairs}u) {{ return; }}
  let base = {base}u + pair * {PAIR_VEC4S}u;
  let at_lo = {name}[base];
  let at_hi = {name}[base + 1u];
  let turns = {name}[base + 2u];
  let g = u32({name}[base + 3u].x);
  let rotates = {name}[base + 3u].y != 0.0;
  var shift = 0u;
  switch g {{
    {indent[:-2].join(shifts)}
    default: {{}}
  }}
  for (var l = 0u; l < 4u; l++) {{
    var a = lo[l];
    var b = hi[l];
    {indent[:-2].join(rotation)}
    scatter_put(g, at_lo[l], shift, a);
    scatter_put(g, at_hi[l], shift, b);
  }}
}}
""")

    return table.reshape(-1), code, bindings


def build(op: Op, graph: Graph, kernel: object) -> list:
    """The projection's dispatch (its decompositions) with the scatter for a store."""
    scatter = plan(op, graph)
    assert not isinstance(scatter, str), scatter
    plain, inner = derived(op, graph, scatter)
    query = next(g for g in scatter.groups if g.query).op.outputs[0]
    table, code, extra = scatter_function(op, graph, scatter)
    what = "+".join(sorted({"ROPE" if g.rotates else "" for g in scatter.groups} - {""}))
    label = f" + {KV_CACHE_WRITE}{'+' + what if what else ''} epilogue ({len(scatter.groups)} writes)"

    def finish(spec: KernelSpec) -> KernelSpec:
        for b in spec.bindings:
            if b.name == "dst":
                b.tensor = query
        # the table rides in the norm prologue's constants where there is one (storage buffers are few: 8 by default)
        host = next((b for b in spec.bindings if b.name == "norm_affine"), None)
        if host is not None:
            base = host.data.size // 4
            host.data = np.concatenate([host.data, table])
            fn = code(host.name, base)
            own = []
        else:
            fn = code("scatter_table", 0)
            own = [Binding("scatter_table", data=table, element="vec4<f32>")]
        spec.bindings += [*own, *(dataclasses.replace(b) for b in extra)]
        spec.functions = [*spec.functions, fn, *(Code(h) for h in helpers_for(fn))]
        spec.out_channels = int(graph.tensors[query].shape[-1])
        spec.label = (spec.label or "").replace(" [", label + " [", 1)
        return spec

    return finishing_each(kernel.build(plain, inner), finish)  # type: ignore[attr-defined]


def stand_alone(op: Op, graph: Graph, kernel: object) -> list:
    """The projection and the write as the two dispatches they were (a device binding too few storage buffers)."""
    fc, kv = split(op)
    return [*kernel.build(fc, graph), *KV_KERNEL.build(kv, graph)]  # type: ignore[attr-defined]
