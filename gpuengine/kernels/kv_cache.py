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
"""

from __future__ import annotations

import numpy as np

from ..layout import slices
from ..model.ir import Graph, Op
from . import layout_view
from .base import Binding, Code, KernelSpec, Lowering
from .common import float_tensors
from .dynamic_index import _index, _source
from .index_map import Ix
from .rope import rope_check, rope_lanes, view_read

KV_CACHE_WRITE = "KV_CACHE_WRITE"
VIEW_UPDATE = "view_update"
ROPE_TABLES = "rope"  # inputs 3 and 4 are cos and sin: the update is rotated as it is written


def logical_update(op: Op, graph: Graph) -> tuple[int, ...]:
    steps = op.opt(VIEW_UPDATE)
    return tuple(steps[-1].out_shape) if steps else tuple(graph.tensors[op.inputs[1]].shape)


def flat_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The rank-2 shape whose PHWC4 storage is the BHWC bytes of `shape` (last axis % 4 == 0)."""
    return int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])


class KvCacheKernel:
    ops = (KV_CACHE_WRITE,)
    internal_ops = (KV_CACHE_WRITE,)

    def supports(self, op: Op, graph: Graph) -> str | None:
        rope = bool(op.opt(ROPE_TABLES))
        if len(op.inputs) != (5 if rope else 3) or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"{KV_CACHE_WRITE} expects cache, update, offsets[, cos, sin] and 1 output"
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
        if start.dtype != np.int32 or start.shape != (len(cache.shape),):
            return f"offsets must be int32 of shape ({len(cache.shape)},)"
        if out.shape != cache.shape or len(u_shape) != len(cache.shape) or not 1 <= len(cache.shape) <= 4:
            return f"update {u_shape} does not fit cache {cache.shape}"
        if any(u > c for u, c in zip(u_shape, cache.shape)) or u_shape[-1] != cache.shape[-1]:
            return f"update {u_shape} must hold whole rows of cache {cache.shape}"
        if cache.shape[-1] % 4 or int(np.prod(u_shape)) == 0:
            return "rows of a multiple of 4 channels"
        if rope:
            tables = [tuple(graph.tensors[t].shape) for t in op.inputs[3:]]
            if any(d != 1 for table in tables for d in table[:-1]):
                return "rotation tables must be the same for every row (a decode step's)"
            return rope_check(u_shape, *tables)
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        cache_t, update_t, start_t = op.inputs[:3]
        shape = tuple(graph.tensors[cache_t].shape)
        u_shape = logical_update(op, graph)
        s_shape = tuple(graph.tensors[start_t].shape)
        c = shape[-1]
        s = slices(c)
        # invocation i -> update row (u0, ...) and channel slice us
        rest = "i"
        lines = [f"let us = {rest} % {s}u;"]
        rest = f"({rest} / {s}u)"
        for j in range(len(u_shape) - 2, -1, -1):
            lines.append(f"let u{j} = {rest} % {u_shape[j]}u;")
            rest = f"({rest} / {u_shape[j]}u)"
        rows = [Ix.const(0) if d == 1 else Ix(f"u{j}", np.int64(0)) for j, d in enumerate(u_shape[:-1])]
        steps = op.opt(VIEW_UPDATE)
        if op.opt(ROPE_TABLES):
            lane = rope_lanes("upd", steps, u_shape, rows, *(tuple(graph.tensors[t].shape) for t in op.inputs[3:]))
        else:
            lane = f"value[l] = {view_read('upd', steps, u_shape, [*rows, Ix('c', np.int64(0))])};"
        starts = [_index("start", s_shape, [Ix.const(j)], d - u + 1, f"s{j}")
                  for j, (d, u) in enumerate(zip(shape[:-1], u_shape[:-1]))]
        linear = "0u"
        for j, d in enumerate(shape[:-1]):
            linear = f"(({linear}) * {d}u + s{j} + u{j})"
        total = int(np.prod(u_shape[:-1], dtype=np.int64)) * s
        params = {"TOTAL": total, "COORDS": Code("\n  ".join(lines)), "START": Code("\n  ".join(starts)),
                  "DST_AT": Code(f"{linear} * {s}u + us"), "LANE": Code(lane)}
        tables = [_source(graph, t, name) for t, name in zip(op.inputs[3:], ("cos_t", "sin_t"))]
        bindings = [Binding("upd", tensor=update_t, element="S1"), _source(graph, start_t, "start"), *tables,
                    Binding("dst", tensor=op.outputs[0], writable=True, raw=True, element="vec4<f32>")]
        what = f"{KV_CACHE_WRITE}{'+ROPE' if op.opt(ROPE_TABLES) else ''}"
        return [KernelSpec("kv_cache", params, bindings, grid=(total, 1, 1), workgroup=(min(64, total), 1, 1),
                           label=f"{what} {u_shape} into {shape} (in place{', view' if steps else ''})")]


KERNEL = KvCacheKernel()
