"""KV_CACHE_WRITE: an internal op (passes/kv_cache_in_place.py) for DYNAMIC_UPDATE_SLICE(cache, rows, offsets)
whose cache is a graph input read by nothing else and whose result is a graph output: a decode step's KV cache
write.

Written as DYNAMIC_UPDATE_SLICE, a step copies the whole cache (input to output, plus the PHWC4 conversions at the
boundary). Here the runtime gives the input and the output one BHWC buffer (runtime/program.py `in_place`), so the
dispatch writes only the update's elements, and readers (ATTENTION) read the cache's BHWC bytes through a layout
view whose stored shape is [rows, C]: with C % 4 == 0 its PHWC4 storage is those bytes. Inputs (cache, update,
offsets[, cos, sin]); output the cache after the write. The update may be read through a layout view (`view_update`:
the slice of a fused QKV projection's output, read where it lies) and rotated on the way (`rope`, with the cos / sin
tables of a decode step, the same for every row: kernels/rope.py), so the key rows need no dispatch of their own.
Several writes (a layer's K and V, each with its own offsets) may share one dispatch: option `groups` gives, per write,
how many of the op's inputs are its own (cache, update, offsets[, cos, sin]), its update view and whether it rotates;
output g is write g's cache. A group may also be a rotation of the step's query (`ROPE` semantics: inputs x, cos,
sin; its view of x; output a PHWC4 tensor, which the runtime then keeps in f32 as the caches are), so one dispatch
does all a decode step's work between the QKV projection and the attention.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import (
    GROUPS,
    KV_CACHE_WRITE,
    OFFSETS_FROM_POSITION,
    QUERY,
    ROPE,
    ROPE_TABLES,
    VIEW_UPDATE,
    VIEW_X,
)
from .. import codegen
from ..layout import slices, to_bhwc
from . import layout_view
from .base import Binding, Code, KernelSpec, Lowering, Touched
from .common import float_tensors
from .dynamic_index import _index, _source
from .index_map import Ix
from .rope import KERNEL as ROPE_KERNEL
from .rope import (
    RowNorm,
    angles_check,
    angles_of,
    epsilon_of,
    norm_check,
    rope_check,
    rope_lanes,
    table_shapes,
    view_read,
)
from .wgsl_math import helpers_for


def writes(op: Op) -> list[Op]:
    """The op as single writes (each one cache, its inputs and options)."""
    groups = op.opt(GROUPS)
    if not groups:
        return [op]
    result, first = [], 0
    for g, (count, steps, rope, *kind) in enumerate(groups):
        fields = {k: v for k, v in op.options.fields.items() if k not in (GROUPS, OFFSETS_FROM_POSITION)}
        own = {VIEW_X: steps} if kind == [QUERY] else {VIEW_UPDATE: steps, ROPE_TABLES: rope}
        if op.opt(OFFSETS_FROM_POSITION) is not None and kind != [QUERY]:  # one tuple per group
            own[OFFSETS_FROM_POSITION] = op.opt(OFFSETS_FROM_POSITION)[g]
        single = dataclasses.replace(op, code=ROPE if kind == [QUERY] else op.code,
                                     inputs=op.inputs[first:first + count], outputs=[op.outputs[g]],
                                     options=dataclasses.replace(op.options, fields={**fields, **own}))
        result.append(single)
        first += count
    return result


def logical_update(op: Op, graph: Graph) -> tuple[int, ...]:
    steps = op.opt(VIEW_UPDATE)
    return tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[op.inputs[1]].shape)


class KvCacheKernel:
    ops = (KV_CACHE_WRITE,)
    internal_ops = (KV_CACHE_WRITE,)

    def supports(self, op: Op, graph: Graph) -> str | None:
        groups = op.opt(GROUPS)
        if groups:
            if sum(g[0] for g in groups) != len(op.inputs) or len(groups) != len(op.outputs) or len(groups) > 3:
                return f"{KV_CACHE_WRITE} groups do not match its inputs and outputs (at most 3)"
            offsets = op.opt(OFFSETS_FROM_POSITION)
            if offsets is not None and (not isinstance(offsets, tuple) or len(offsets) != len(groups)):
                return f"{OFFSETS_FROM_POSITION} must hold one entry per group"
            for single in writes(op):
                reason = (ROPE_KERNEL if single.code == ROPE else self).supports(single, graph)
                if reason:
                    return reason
            return None
        rope = bool(op.opt(ROPE_TABLES))
        if len(op.inputs) not in ((5, 8) if rope else (3,)) or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"{KV_CACHE_WRITE} expects cache, update, offsets[, cos, sin[, scale, offset, epsilon]] and 1 output"
        reason = float_tensors(op, graph, integers=True)
        if reason:
            return reason
        cache, update, start = (graph.tensors[t] for t in op.inputs[:3])
        out = graph.tensors[op.outputs[0]]
        if cache.dtype != np.float32 or update.dtype != np.float32 or out.dtype != np.float32 \
                or cache.quantization or update.quantization or out.quantization or update.data is not None:
            return "cache and a run-time update must be float32"
        steps = op.opt(VIEW_UPDATE)
        if steps and layout_view.check(tuple(steps)):
            return layout_view.check(tuple(steps))
        u_shape = logical_update(op, graph)
        from_position = op.opt(OFFSETS_FROM_POSITION)
        if from_position is not None:
            if start.dtype != np.int32 or start.size != 1 or start.data is not None \
                    or len(from_position) != len(cache.shape) or None not in from_position:
                return f"offsets from the position: an int32 of one element and {len(cache.shape)} offsets"
        elif start.dtype != np.int32 or start.shape != (len(cache.shape),):
            return f"offsets must be int32 of shape ({len(cache.shape)},)"
        if out.shape != cache.shape or len(u_shape) != len(cache.shape) or not 1 <= len(cache.shape) <= 4:
            return f"update {u_shape} does not fit cache {cache.shape}"
        if any(u > c for u, c in zip(u_shape, cache.shape)):
            return f"update {u_shape} does not fit cache {cache.shape}"
        if cache.shape[-1] % 4 or int(np.prod(u_shape)) == 0:
            return "rows of a multiple of 4 channels"
        if rope:
            if u_shape[-1] != cache.shape[-1]:
                return "a rotated update must hold whole rows of the cache"
            if angles_check(op, graph, 3):
                return angles_check(op, graph, 3)
            tables = list(table_shapes(op, graph, 3))
            if any(d != 1 for table in tables for d in table[:-1]):
                return "rotation tables must be the same for every row (a decode step's)"
            if len(op.inputs) == 8 and norm_check(graph, op.inputs[5:], u_shape[-1]):
                return norm_check(graph, op.inputs[5:], u_shape[-1])
            return rope_check(u_shape, *tables)
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        names: dict[int, str] = {}  # read-only tensors bound once, whichever writes read them
        bindings: list[Binding] = []

        def bind(t: int, prefix: str, element: str | None = None) -> str:
            if t not in names:
                names[t] = f"{prefix}{len(names)}"
                binding = _source(graph, t, names[t])
                if element is not None and binding.data is None:
                    binding.element = element
                bindings.append(binding)
            return names[t]

        blocks, labels, totals, outs = [], [], [], []
        for g, single in enumerate(writes(op)):
            query = single.code == ROPE
            block, total, label = (self._rotate if query else self._write)(single, graph, g, bind)
            blocks.append(f"if (i < {total}u) {{\n    {block}\n  }}")
            labels.append(label)
            totals.append(total)
            whole = query or logical_update(single, graph)[-1] == graph.tensors[single.inputs[0]].shape[-1]
            # cost declaration: a write stores only its update's elements of the cache
            outs.append(Binding(f"dst{g}", tensor=single.outputs[0], writable=True) if query else
                        Binding(f"dst{g}", tensor=single.outputs[0], writable=True, raw=True,
                                element="vec4<f32>" if whole else "f32",
                                touched=Touched(int(np.prod(logical_update(single, graph), dtype=np.int64)),
                                                graph.tensors[single.inputs[0]].size)))
        bindings += outs
        total = max(totals)
        params = {"TOTAL": total, "WRITES": Code("\n  ".join(blocks)),
                  "HELPERS": Code("\n".join(helpers_for(*blocks)))}
        return [KernelSpec("kv_cache", params, bindings, grid=(total, 1, 1), workgroup=(min(64, total), 1, 1),
                           label=" + ".join(labels) + " (in place)")]

    @staticmethod
    def _rotate(op: Op, graph: Graph, g: int, bind) -> tuple[str, int, str]:
        """WGSL of a ROPE group for invocation i (one PHWC4 vec4 of its output), its invocations and its label."""
        x_t, cos_t, sin_t = op.inputs[:3]
        norm = (RowNorm(bind(op.inputs[3], "tab"), bind(op.inputs[4], "tab"), epsilon_of(graph, op.inputs[5]))
                if len(op.inputs) == 6 else None)
        steps = op.opt(VIEW_X)
        shape = tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[x_t].shape)
        b, h, w, c = to_bhwc(shape)
        s = slices(c)
        x, cos, sin = bind(x_t, "upd", "S1"), bind(cos_t, "tab"), bind(sin_t, "tab")
        names = {1: [], 2: ["ob"], 3: ["ob", "ox"], 4: ["ob", "oy", "ox"]}[len(shape)]
        rows = [Ix.const(0) if d == 1 else Ix(n, np.int64(0)) for d, n in zip(shape[:-1], names)]
        lane = rope_lanes(x, steps, shape, rows, *table_shapes(op, graph, 1), cos=cos, sin=sin, norm=norm,
                          angles=angles_of(op, graph, 1))
        lines = [f"let ox = i % {w}u;", f"let oy = (i / {w}u) % {h}u;", f"let os = (i / {w * h}u) % {s}u;",
                 f"let ob = i / {w * h * s}u;",
                 codegen.fill("lanes_guarded.wgsl", {"INIT": Code("vec4<f32>(0.0)"), "LANE": Code(lane), "C": c},
                              "    "),
                 f"dst{g}[i] = D4(value);"]
        return "\n    ".join(lines), b * h * w * s, \
            f"{ROPE} {shape}{' (view x)' if steps else ''}{' (RMS_NORM of x)' if norm else ''}"

    @staticmethod
    def _write(op: Op, graph: Graph, g: int, bind) -> tuple[str, int, str]:
        """WGSL of write g for invocation i, its invocations and its label. An update of whole rows is stored one
        vec4 per invocation (BTNH, BNTH caches); a column (the K cache stored [B, N, H, T]) one element each."""
        cache_t, update_t, start_t = op.inputs[:3]
        shape = tuple(graph.tensors[cache_t].shape)
        u_shape = logical_update(op, graph)
        s_shape = tuple(graph.tensors[start_t].shape)
        rows_whole = u_shape[-1] == shape[-1]
        s = slices(shape[-1])
        upd, start = bind(update_t, "upd", "S1"), bind(start_t, "start")
        # invocation i -> update coordinates (u0, ...) and channel slice us (whole rows) or channel u{last}
        rest = "i"
        lines = [f"let us = {rest} % {s}u;"] if rows_whole else []
        rest = f"({rest} / {s}u)" if rows_whole else rest
        axes = len(u_shape) - 1 if rows_whole else len(u_shape)
        for j in range(axes - 1, -1, -1):
            lines.append(f"let u{j} = {rest} % {u_shape[j]}u;")
            rest = f"({rest} / {u_shape[j]}u)"
        coords = [Ix.const(0) if d == 1 else Ix(f"u{j}", np.int64(0)) for j, d in enumerate(u_shape[:axes])]
        steps = op.opt(VIEW_UPDATE)
        from_position = op.opt(OFFSETS_FROM_POSITION)
        for j, (d, u) in enumerate(zip(shape[:axes], u_shape[:axes])):
            if from_position is None or from_position[j] is None:  # clamped so the update fits, as DUS does
                lines.append(_index(start, s_shape, [Ix.const(0 if from_position else j)], d - u + 1, f"s{j}"))
            else:
                lines.append(f"let s{j} = {min(max(int(from_position[j]), 0), d - u)}u;")
        linear = "0u"
        for j, d in enumerate(shape[:axes]):
            linear = f"(({linear}) * {d}u + s{j} + u{j})"
        what = f"{KV_CACHE_WRITE}{'+ROPE' if op.opt(ROPE_TABLES) else ''}"
        label = f"{what} {u_shape} into {shape}{' (view)' if steps else ''}"
        if not rows_whole:
            lines.append(f"dst{g}[{linear}] = {view_read(upd, steps, u_shape, coords)};")
            return "\n    ".join(lines), int(np.prod(u_shape, dtype=np.int64)), label
        if op.opt(ROPE_TABLES):
            cos, sin = bind(op.inputs[3], "tab"), bind(op.inputs[4], "tab")
            norm = (RowNorm(bind(op.inputs[5], "tab"), bind(op.inputs[6], "tab"), epsilon_of(graph, op.inputs[7]))
                    if len(op.inputs) == 8 else None)
            lane = rope_lanes(upd, steps, u_shape, coords, *table_shapes(op, graph, 3), cos=cos, sin=sin, norm=norm,
                              angles=angles_of(op, graph, 3))
            label += " (RMS_NORM of the update)" if norm else ""
        else:
            lane = f"value[l] = {view_read(upd, steps, u_shape, [*coords, Ix('c', np.int64(0))])};"
        lines += ["var value = vec4<f32>(0.0);",
                  f"for (var l = 0u; l < 4u; l++) {{\n      let c = us * 4u + l;\n      {lane}\n    }}",
                  f"dst{g}[{linear} * {s}u + us] = value;"]
        return "\n    ".join(lines), int(np.prod(u_shape[:-1], dtype=np.int64)) * s, label


KERNEL = KvCacheKernel()
