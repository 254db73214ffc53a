"""KV_CACHE_WRITE: an internal op (passes/kv_cache_in_place.py) for DYNAMIC_UPDATE_SLICE(cache, rows, offsets)
whose cache is a graph input read by nothing else and whose result is a graph output: a decode step's KV cache
write.

Written as DYNAMIC_UPDATE_SLICE, a step copies the whole cache (input to output, plus the PHWC4 conversions at the
boundary). Here the runtime gives the input and the output one BHWC buffer (runtime/program.py `in_place`), so the
dispatch writes only the update's elements, and readers (ATTENTION) read the cache's BHWC bytes through a layout
view whose stored shape is [rows, C]: with C % 4 == 0 its PHWC4 storage is those bytes. Inputs (cache, update,
offsets); output the cache after the write.
"""

from __future__ import annotations

import numpy as np

from ..layout import slices
from ..model.ir import Graph, Op
from .base import Binding, Code, KernelSpec, Lowering
from .common import float_tensors
from .dynamic_index import _index, _source
from .index_map import Ix, storage_index

KV_CACHE_WRITE = "KV_CACHE_WRITE"


def flat_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The rank-2 shape whose PHWC4 storage is the BHWC bytes of `shape` (last axis % 4 == 0)."""
    return int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])


class KvCacheKernel:
    ops = (KV_CACHE_WRITE,)
    internal_ops = (KV_CACHE_WRITE,)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.inputs) != 3 or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"{KV_CACHE_WRITE} expects cache, update, offsets and 1 output"
        reason = float_tensors(op, graph, integers=True)
        if reason:
            return reason
        cache, update, start = (graph.tensors[t] for t in op.inputs)
        out = graph.tensors[op.outputs[0]]
        if cache.dtype != np.float32 or update.dtype != np.float32 or out.dtype != np.float32 \
                or cache.quantization or update.quantization or out.quantization:
            return "cache and update must be float32"
        if start.dtype != np.int32 or start.shape != (len(cache.shape),):
            return f"offsets must be int32 of shape ({len(cache.shape)},)"
        if out.shape != cache.shape or len(update.shape) != len(cache.shape) or not 1 <= len(cache.shape) <= 4:
            return f"update {update.shape} does not fit cache {cache.shape}"
        if any(u > c for u, c in zip(update.shape, cache.shape)) or update.shape[-1] != cache.shape[-1]:
            return f"update {update.shape} must hold whole rows of cache {cache.shape}"
        if cache.shape[-1] % 4 or update.size == 0:
            return "rows of a multiple of 4 channels"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        cache_t, update_t, start_t = op.inputs
        shape = tuple(graph.tensors[cache_t].shape)
        u_shape = tuple(graph.tensors[update_t].shape)
        s_shape = tuple(graph.tensors[start_t].shape)
        c = shape[-1]
        s = slices(c)
        # invocation i -> update coordinates (u0, ..., channel slice us)
        coords, rest = [], "i"
        lines = [f"let us = {rest} % {s}u;"]
        rest = f"({rest} / {s}u)"
        for j in range(len(u_shape) - 2, -1, -1):
            lines.append(f"let u{j} = {rest} % {u_shape[j]}u;")
            rest = f"({rest} / {u_shape[j]}u)"
        coords = [Ix(f"u{j}", np.int64(0)) for j in range(len(u_shape) - 1)]
        _, upd_vec = storage_index(u_shape, [*coords, Ix("us", np.int64(0)) * 4])
        starts = [_index("start", s_shape, [Ix.const(j)], d - u + 1, f"s{j}")
                  for j, (d, u) in enumerate(zip(shape[:-1], u_shape[:-1]))]
        linear = "0u"
        for j, d in enumerate(shape[:-1]):
            linear = f"(({linear}) * {d}u + s{j} + u{j})"
        dst = f"{linear} * {s}u + us"
        total = int(np.prod(u_shape[:-1], dtype=np.int64)) * s
        params = {"TOTAL": total, "COORDS": Code("\n  ".join(lines)), "START": Code("\n  ".join(starts)),
                  "DST_AT": Code(dst), "UPDATE_AT": Code(upd_vec.code)}
        bindings = [_source(graph, update_t, "upd"), _source(graph, start_t, "start"),
                    Binding("dst", tensor=op.outputs[0], writable=True, raw=True, element="vec4<f32>")]
        bindings[0].element = "S4"
        return [KernelSpec("kv_cache", params, bindings, grid=(total, 1, 1), workgroup=(min(64, total), 1, 1),
                           label=f"{KV_CACHE_WRITE} {u_shape} into {shape} (in place)")]


KERNEL = KvCacheKernel()
