"""Copies whose source positions are run-time integers: EMBEDDING_LOOKUP, GATHER_ND and DYNAMIC_UPDATE_SLICE,
and GATHER with run-time indices (kernels/gather.py hands those here: `gather_support`, `build_gather`).

The index tensors are int32 tensors on the GPU (exact f32 values, kernels/common.py EXACT_TYPES): token ids, a
position, the offsets of a KV-cache write. Each output lane reads its indices, clamps them into the source
(a shader never reads outside a buffer) and copies one element, through copy.wgsl lane by lane. Clamping is
DYNAMIC_UPDATE_SLICE's own semantics (the update is moved to fit, as LiteRT does); for a lookup an index out of
range is an error in LiteRT, which the runtime checks on the host where the indices come from the host
(runtime/bounds.py) and the shader clamps otherwise. An int8 EMBEDDING_LOOKUP table (LiteRT's hybrid lookup) is read
packed with its row scales (kernels/packed_int8.py); a constant [V, D] table larger than one binding in row chunks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...model.ir import Graph, Op
from ...model.quantization import INT4, int8_values
from ..layout import slices, to_bhwc, to_phwc4
from . import packed_int8
from .base import Binding, Code, KernelSpec, Lowering, Touched
from .common import float_tensors, tensor_values
from .index_map import Ix, lanes, output_coords, storage_index
from .packed_int8 import chunked_reader, chunked_rows, pack_rows

_DUMMY_GRID = tuple(np.zeros((1, 1, 1, 1), np.int64) for _ in range(4))


def _source(graph: Graph, t: int, name: str) -> Binding:
    tensor = graph.tensors[t]
    if tensor.data is not None:
        return Binding(name, data=to_phwc4(tensor_values(tensor).reshape(to_bhwc(tensor.shape))), element="S1")
    return Binding(name, tensor=t, element="S1")


def _at(name: str, shape: tuple[int, ...], coords: list[Ix]) -> str:
    """WGSL reading the element at logical `coords` of a PHWC4 tensor bound as `name` (S1 view), as f32."""
    flat, _ = storage_index(shape, coords)
    return f"f32({name}[{flat.code}])"


def _index(name: str, shape: tuple[int, ...], coords: list[Ix], size: int, var: str) -> str:
    """`let var: u32` = the integer at `coords` of index tensor `name`, clamped to [0, size)."""
    return f"let {var} = u32(clamp(i32({_at(name, shape, coords)}), 0i, {max(size - 1, 0)}i));"


def _int8_table(graph: Graph, data: int, out: int) -> bool:
    """A constant int8 (or int4) table with symmetric per-row or per-tensor scales read into a float output
    (LiteRT's hybrid EMBEDDING_LOOKUP: value = q * scale[row]; a GATHER + DEQUANTIZE folded into one GATHER by
    passes/fold_gather_dequantize.py): the GPU reads it
    packed, 4 values per u32, int4 8 per u32 (kernels/packed_int8.py)."""
    table, result = graph.tensors[data], graph.tensors[out]
    return (result.dtype == np.float32 and result.quantization is None and table.data is not None
            and int8_values(table) is not None)


def _table(graph: Graph, t: int, out: int, name: str) -> tuple[list[Binding], list[Code], Callable[[list[Ix]], str]]:
    """Bindings, WGSL functions and a reader `at(coords) -> f32 code` of the element at logical `coords` of the
    table or source tensor t: PHWC4 (f32 / f16; a constant [V, D] table larger than one binding in row chunks), or
    for an int8 table its packed rows times the row's scale."""
    tensor = graph.tensors[t]
    shape = tuple(tensor.shape)
    if not _int8_table(graph, t, out):
        if tensor.data is None or len(shape) != 2 or shape[0] * slices(shape[1]) * 16 <= packed_int8.MAX_BINDING_BYTES:
            return [_source(graph, t, name)], [], lambda coords: _at(name, shape, coords)
        # a [V, D] table larger than one binding: PHWC4 keeps each row's slices together, so split it by rows
        rows = to_phwc4(tensor_values(tensor).reshape(to_bhwc(shape))).reshape(shape[0], -1)
        fn, bindings = chunked_rows(f"{name}_at", name, rows, "S1", 1)
        return bindings, [fn], lambda coords: f"f32({name}_at({coords[0].code}, {coords[1].code}))"
    channels = shape[-1] if len(shape) > 1 else 1
    packed = pack_rows(tensor, channels)
    fn, bindings = chunked_reader(name, packed)
    rest = shape[1:]
    si = -(-channels // 4)

    def at(coords: list[Ix]) -> str:
        e = Ix.const(0)
        for k, coord in enumerate(coords[1:]):
            e = e + coord * int(np.prod(rest[k + 1:], dtype=np.int64))
        row = coords[0].code
        word = f"({e.code}) / {channels}u * {si}u + ({e.code}) % {channels}u / 4u"
        bits = f"({e.code}) % {channels}u % 4u * 8u"
        scale = (f"{name}_block_scale({row}, ({e.code}) / {packed.block}u)" if packed.block
                 else f"{name}_scale[min({row}, {packed.rows - 1}u)]")
        return f"(f32(extractBits(bitcast<i32>({name}_word({row}, {word})), {bits}, 8u)) * {scale})"

    if packed.block:
        return bindings, [fn], at
    return [*bindings, Binding(f"{name}_scale", data=packed.scale, element="f32")], [fn], at


def _gathered(bindings: list[Binding], graph: Graph, source: int, out: int) -> None:
    """Cost declaration: a gather reads of its source (each of the table's bindings: rows, scales, chunks) only the
    elements it copies out, the output's share of the source's elements (one token's row of an embedding table)."""
    part = Touched(graph.tensors[out].size, graph.tensors[source].size)
    for b in bindings:
        b.touched = part


def _spec(op: Op, graph: Graph, bindings: list[Binding], lane: str) -> KernelSpec:
    out_t = op.outputs[0]
    b, h, w, c = to_bhwc(graph.tensors[out_t].shape)
    s = slices(c)
    body = lanes(Code("vec4<f32>(0.0)"), Code(lane), c)
    return KernelSpec("copy", {"S": s, "H": h, "W": w, "BODY": body},
                      [*bindings, Binding("dst", tensor=out_t, writable=True)], grid=(w, h, b * s),
                      out_channels=c, label=op.code)


def _coords(graph: Graph, t: int) -> list[Ix]:
    return output_coords(graph.tensors[t].shape, _DUMMY_GRID)


def _same_type(graph: Graph, data: int, out: int) -> str | None:
    a, b = graph.tensors[data], graph.tensors[out]
    if a.dtype != b.dtype or a.quantization is not None or b.quantization is not None:
        return f"data {a.name!r} is {a.dtype} and output {b.name!r} {b.dtype}: the GPU copies one unquantized type"
    return None


def _int_indices(graph: Graph, t: int) -> str | None:
    tensor = graph.tensors[t]
    if tensor.dtype != np.int32:
        return f"indices {tensor.name!r} are {tensor.dtype}; the GPU takes int32 indices"
    return None


def _gather_layout(op: Op, graph: Graph) -> tuple[int, int]:
    """(axis, batch_dims) of a GATHER, normalized (negative values count from the end); may be out of range."""
    rank, index_rank = len(graph.tensors[op.inputs[0]].shape), len(graph.tensors[op.inputs[1]].shape)
    axis, batch_dims = int(op.opt("axis", 0) or 0), int(op.opt("batch_dims", 0) or 0)
    return (axis + rank if axis < 0 else axis), (batch_dims + index_rank if batch_dims < 0 else batch_dims)


def gather_support(op: Op, graph: Graph) -> str | None:
    """Why this GATHER cannot read its indices at run time on the GPU (None: it can). Any axis and batch_dims
    of tensors of rank <= 4; indices int32 at run time (int64 tensors do not live on the GPU) or constant."""
    if len(op.inputs) != 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
        return "expects 2 inputs (params, indices) and 1 output"
    params, indices = (graph.tensors[t] for t in op.inputs)
    if indices.data is None and indices.dtype != np.int32:
        return f"run-time indices {indices.name!r} are {indices.dtype}; the GPU takes int32 (int64 stays on LiteRT)"
    hybrid = _int8_table(graph, op.inputs[0], op.outputs[0])  # passes/fold_gather_dequantize.py made it
    reason = None if hybrid else (float_tensors(op, graph, integers=True)
                                  or _same_type(graph, op.inputs[0], op.outputs[0]))
    if reason:
        return reason
    axis, batch_dims = _gather_layout(op, graph)
    if not 0 <= axis < len(params.shape):
        return f"axis {op.opt('axis', 0)} is out of range for rank {len(params.shape)}"
    if not 0 <= batch_dims <= min(axis, len(indices.shape)) or params.shape[:batch_dims] != indices.shape[:batch_dims]:
        return f"batch_dims {op.opt('batch_dims', 0)} does not fit params {params.shape} and indices {indices.shape}"
    out = params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]
    if out != graph.tensors[op.outputs[0]].shape:
        return f"output shape {graph.tensors[op.outputs[0]].shape} is not {out}"
    if any(graph.tensors[t].size == 0 for t in [*op.inputs, *op.outputs]):
        return "empty tensor"
    return None


def build_gather(op: Op, graph: Graph) -> Lowering:
    """Each output lane reads its index (clamped into the gathered axis), then copies one element of params."""
    params, indices = op.inputs
    p_shape, i_shape = graph.tensors[params].shape, graph.tensors[indices].shape
    axis, batch_dims = _gather_layout(op, graph)
    q = len(i_shape) - batch_dims
    o = _coords(graph, op.outputs[0])
    line = _index("indices", i_shape, [*o[:batch_dims], *o[axis:axis + q]], p_shape[axis], "row")
    bindings, functions, at = _table(graph, params, op.outputs[0], "params")
    _gathered(bindings, graph, params, op.outputs[0])
    lane = f"{line} value[l] = {at([*o[:axis], Ix('row', 0), *o[axis + q:]])};"
    spec = _spec(op, graph, [*bindings, _source(graph, indices, "indices")], lane)
    spec.functions = functions
    if _int8_table(graph, params, op.outputs[0]):
        bits = 4 if graph.tensors[params].type_code == INT4 else 8
        spec.label += f" (int{bits} table read packed, times its scale)"
    return [spec]


class DynamicIndexKernel:
    ops = ("EMBEDDING_LOOKUP", "GATHER_ND", "DYNAMIC_UPDATE_SLICE")

    def supports(self, op: Op, graph: Graph) -> str | None:
        want = 3 if op.code == "DYNAMIC_UPDATE_SLICE" else 2
        if len(op.inputs) != want or len(op.outputs) != 1 or min(op.inputs) < 0:
            return f"expects {want} inputs and 1 output"
        reason = float_tensors(op, graph, integers=True)
        if reason:
            return reason
        if any(graph.tensors[t].size == 0 for t in [*op.inputs, *op.outputs]):
            return "empty tensor"
        out = graph.tensors[op.outputs[0]].shape
        if op.code == "EMBEDDING_LOOKUP":
            ids, table = (graph.tensors[t] for t in op.inputs)
            reason = _int_indices(graph, op.inputs[0]) or (
                None if _int8_table(graph, op.inputs[1], op.outputs[0])
                else _same_type(graph, op.inputs[1], op.outputs[0]))
            if reason:
                return reason
            if len(ids.shape) != 1 or len(table.shape) < 1 or out != (ids.shape[0], *table.shape[1:]):
                return f"ids {ids.shape} and table {table.shape} do not give the output {out}"
            return None
        if op.code == "GATHER_ND":
            params, indices = (graph.tensors[t] for t in op.inputs)
            reason = _int_indices(graph, op.inputs[1]) or _same_type(graph, op.inputs[0], op.outputs[0])
            if reason:
                return reason
            k = indices.shape[-1] if indices.shape else 0
            if not indices.shape or not 1 <= k <= len(params.shape):
                return f"indices {indices.shape} do not index params {params.shape}"
            if out != (*indices.shape[:-1], *params.shape[k:]):
                return f"output {out} is not {(*indices.shape[:-1], *params.shape[k:])}"
            return None
        operand, update, start = (graph.tensors[t] for t in op.inputs)
        reason = (_int_indices(graph, op.inputs[2]) or _same_type(graph, op.inputs[0], op.outputs[0])
                  or _same_type(graph, op.inputs[1], op.outputs[0]))
        if reason:
            return reason
        if out != operand.shape or len(update.shape) != len(out) or start.shape != (len(out),) \
                or any(u > o for u, o in zip(update.shape, out)):
            return f"update {update.shape} at offsets {start.shape} does not fit operand {operand.shape}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        o = _coords(graph, op.outputs[0])
        if op.code == "EMBEDDING_LOOKUP":
            ids, table = op.inputs
            ids_shape, table_shape = graph.tensors[ids].shape, graph.tensors[table].shape
            bindings, functions, at = _table(graph, table, op.outputs[0], "table")
            _gathered(bindings, graph, table, op.outputs[0])
            lane = (_index("ids", ids_shape, [o[0]], table_shape[0], "row") + " "
                    + f"value[l] = {at([Ix('row', 0), *o[1:]])};")
            spec = _spec(op, graph, [_source(graph, ids, "ids"), *bindings], lane)
            spec.functions = functions
            if _int8_table(graph, table, op.outputs[0]):
                t = graph.tensors[table]
                bits = 4 if t.type_code == INT4 else 8
                scales = f"block scales ({t.quantization.block_size} a block)" if t.quantization.blockwise \
                    else "row scales"
                spec.label += f" (int{bits} table read packed, times its {scales})"
            return [spec]
        if op.code == "GATHER_ND":
            params, indices = op.inputs
            p_shape, i_shape = graph.tensors[params].shape, graph.tensors[indices].shape
            batch, k = len(i_shape) - 1, i_shape[-1]
            lines = [_index("indices", i_shape, [*o[:batch], Ix.const(j)], p_shape[j], f"i{j}") for j in range(k)]
            coords = [Ix(f"i{j}", 0) for j in range(k)] + o[batch:]
            lane = " ".join([*lines, f"value[l] = {_at('params', p_shape, coords)};"])
            source = _source(graph, params, "params")
            _gathered([source], graph, params, op.outputs[0])
            return [_spec(op, graph, [source, _source(graph, indices, "indices")], lane)]
        operand, update, start = op.inputs
        shape, u_shape = graph.tensors[operand].shape, graph.tensors[update].shape
        s_shape = graph.tensors[start].shape
        lines, inside = [], []
        for j, (d, u) in enumerate(zip(shape, u_shape)):
            lines.append(_index("start", s_shape, [Ix.const(j)], d - u + 1, f"s{j}"))  # clamped so the update fits
            inside.append(f"{o[j].code} >= s{j} && {o[j].code} < s{j} + {u}u")
        rel = [Ix(f"({o[j].code} - s{j})", 0) for j in range(len(shape))]
        lane = " ".join([*lines, f"if ({' && '.join(inside) or 'true'}) {{ value[l] = {_at('upd', u_shape, rel)}; }}",
                         f"else {{ value[l] = {_at('operand', shape, o)}; }}"])
        bindings = [_source(graph, operand, "operand"), _source(graph, update, "upd"), _source(graph, start, "start")]
        return [_spec(op, graph, bindings, lane)]


KERNEL = DynamicIndexKernel()
