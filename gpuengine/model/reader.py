""".tflite bytes -> IR, validated while read: a malformed file becomes a ModelError, never a crash or hang."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import struct
from typing import Any

import flatbuffers
import numpy as np
import tflite
from tflite.BuiltinOperator import BuiltinOperator
from tflite.BuiltinOptions import BuiltinOptions
from tflite.BuiltinOptions2 import BuiltinOptions2

from ..errors import ModelError
from .ir import TENSOR_TYPES, Graph, Model, Op, Options, Quantization, SignatureDef, Sparsity, Tensor
from .quantization import INT4

MAX_RANK = 16
MAX_ELEMENTS = 1 << 34  # a declared tensor larger than this is a corrupt file, not a model

OP_NAMES: dict[int, str] = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
OPTION_NAMES: dict[int, str] = {v: k for k, v in vars(BuiltinOptions).items() if not k.startswith("_")}
OPTION2_NAMES: dict[int, str] = {v: k for k, v in vars(BuiltinOptions2).items() if not k.startswith("_")}


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@functools.cache
def option_fields(kind: str) -> tuple[tuple[str, str, bool], ...]:
    """(schema accessor, snake_case name, is_vector) of every field of an options table, by reflection."""
    cls = getattr(tflite, kind)
    names = [n for n, v in vars(cls).items() if callable(v) and n[0].isupper()]
    result = []
    for name in names:  # (not startswith("Init"): CallOnceOptions has a field InitSubgraphIndex)
        if name == "Init" or name.startswith("GetRootAs") \
                or name.endswith(("Length", "AsNumpy", "IsNone", "BufferHasIdentifier")):
            continue
        result.append((name, snake_case(name), f"{name}Length" in names))
    return tuple(result)


def _decode_options(kind: str, table: Any) -> Options:
    cls = getattr(tflite, kind, None)
    if cls is None:
        return Options(kind)
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    fields: dict[str, Any] = {}
    for accessor, name, is_vector in option_fields(kind):
        if is_vector:
            n = getattr(obj, f"{accessor}Length")()
            _check_count(n, table.Bytes, f"{kind}.{name}")
            fields[name] = [getattr(obj, accessor)(j) for j in range(n)]
        else:
            try:
                value = getattr(obj, accessor)()
            except TypeError:  # accessor takes an argument we do not model (nested tables)
                continue
            if isinstance(value, (int, float, bool, bytes)) or value is None:
                fields[name] = value
    return Options(kind, fields)


def _check_count(n: int, buf: Any, what: str) -> None:
    # Every vector element takes at least one byte, so a count beyond the file size is corruption.
    if n < 0 or n > len(buf):
        raise ModelError(f"{what}: vector length {n} exceeds the file size ({len(buf)} bytes)")


def _numpy(getter: Any, length: int) -> np.ndarray:
    return getter() if length else np.zeros(0)


def read_model(source: bytes | bytearray | memoryview | str | os.PathLike) -> Model:
    """Parse a .tflite model from bytes or a path; raises ModelError naming what is wrong."""
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as f:
                data: Any = f.read()
        except OSError as e:
            raise ModelError(f"cannot read model file {os.fspath(source)!r}: {e.strerror}") from e
    else:
        data = bytes(source) if isinstance(source, memoryview) else source
    if len(data) < 8:
        raise ModelError(f"not a .tflite model: only {len(data)} bytes")
    if bytes(data[4:8]) != b"TFL3":
        raise ModelError("not a .tflite model: missing the 'TFL3' file identifier")
    try:
        return _read(data)
    except ModelError:
        raise
    except RecursionError as e:
        raise ModelError("malformed .tflite model: nested tables too deep") from e
    except struct.error as e:  # a table or vector read past the end: the file was cut short
        need = re.search(r"at least (\d+) bytes", str(e))
        if need and int(need.group(1)) > len(data):
            raise ModelError(f"truncated: the file has {len(data)} bytes, its tables need {need.group(1)}") from e
        raise ModelError(f"malformed .tflite model: {e}") from e
    except Exception as e:  # noqa: BLE001 - any decoding failure of a corrupt flatbuffer
        raise ModelError(f"malformed .tflite model: {type(e).__name__}: {e}") from e


def _read(data: bytes) -> Model:
    root = int.from_bytes(data[0:4], "little")
    if root + 4 > len(data):
        raise ModelError(f"truncated: the file has {len(data)} bytes, its tables need {root + 4} (root table offset "
                         f"{root})")
    m = tflite.Model.GetRootAsModel(data, 0)
    buffers = _read_buffers(m, data)
    n_codes = m.OperatorCodesLength()
    _check_count(n_codes, data, "operator_codes")
    codes: list[tuple[str, int, str | None, int]] = []
    for i in range(n_codes):
        oc = m.OperatorCodes(i)
        builtin = max(int(oc.DeprecatedBuiltinCode()), int(oc.BuiltinCode()))
        custom = oc.CustomCode()
        custom_s = custom.decode("utf-8", "replace") if custom is not None else None
        name = OP_NAMES.get(builtin)
        if builtin == BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES:  # a marker: the code is in builtin_code
            raise ModelError(f"operator_codes[{i}]: builtin code {builtin} (PLACEHOLDER_FOR_GREATER_OP_CODES) is a "
                             "marker for codes above 126 stored in builtin_code, not an operator")
        if name is None:
            raise ModelError(f"operator_codes[{i}]: unknown builtin operator code {builtin}")
        if name == "CUSTOM":
            if not custom_s:
                raise ModelError(f"operator_codes[{i}]: CUSTOM op without a custom_code")
            name = custom_s
        version = max(1, int(oc.Version()))
        codes.append((name, builtin, custom_s if builtin == BuiltinOperator.CUSTOM else None, version))

    n_sub = m.SubgraphsLength()
    _check_count(n_sub, data, "subgraphs")
    if n_sub == 0:
        raise ModelError("model has no subgraphs")
    subgraphs = [_read_subgraph(m.Subgraphs(i), i, buffers, codes, data) for i in range(n_sub)]

    signatures = []
    n_sig = m.SignatureDefsLength()
    _check_count(n_sig, data, "signature_defs")
    for i in range(n_sig):
        s = m.SignatureDefs(i)
        sub = s.SubgraphIndex()
        if not 0 <= sub < n_sub:
            raise ModelError(f"signature_defs[{i}]: subgraph index {sub} out of range (0..{n_sub - 1})")
        n_tensors = len(subgraphs[sub].tensors)

        def tensor_map(getter: Any, n: int, what: str, n_tensors: int = n_tensors) -> dict[str, int]:
            _check_count(n, data, what)
            out = {}
            for j in range(n):
                tm = getter(j)
                idx = tm.TensorIndex()
                if not 0 <= idx < n_tensors:
                    raise ModelError(f"{what}[{j}]: tensor index {idx} out of range")
                out[(tm.Name() or b"").decode("utf-8", "replace")] = idx
            return out

        signatures.append(SignatureDef(
            key=(s.SignatureKey() or b"").decode("utf-8", "replace"), subgraph=sub,
            inputs=tensor_map(s.Inputs, s.InputsLength(), f"signature_defs[{i}].inputs"),
            outputs=tensor_map(s.Outputs, s.OutputsLength(), f"signature_defs[{i}].outputs"),
        ))

    metadata: dict[str, bytes] = {}
    n_meta = m.MetadataLength()
    _check_count(n_meta, data, "metadata")
    for i in range(n_meta):
        md = m.Metadata(i)
        b = md.Buffer()
        if not 0 <= b < len(buffers):
            raise ModelError(f"metadata[{i}]: buffer index {b} out of range (0..{len(buffers) - 1})")
        metadata[(md.Name() or b"").decode("utf-8", "replace")] = bytes(buffers[b])
    desc = m.Description()
    return Model(subgraphs=subgraphs, version=m.Version(),
                 description=desc.decode("utf-8", "replace") if desc else "",
                 signatures=signatures, metadata=metadata)


def _read_buffers(m: Any, data: bytes) -> list[np.ndarray]:
    n = m.BuffersLength()
    _check_count(n, data, "buffers")
    out = []
    for i in range(n):
        b = m.Buffers(i)
        offset, size = int(b.Offset()), int(b.Size())
        if offset > 1:  # stored after the flatbuffer (models over 2 GB)
            if offset + size > len(data):
                raise ModelError(f"truncated: the file has {len(data)} bytes, its buffers[{i}] (offset {offset}, "
                                 f"size {size}) needs {offset + size}")
            out.append(np.frombuffer(data, np.uint8, size, offset))
            continue
        length = b.DataLength()
        if length == 0:
            out.append(np.zeros(0, np.uint8))
            continue
        start = b._tab.Vector(4)  # noqa: SLF001 - the vector's position, for a bounds check before the view
        if start < 0:
            raise ModelError(f"buffers[{i}]: data at {start} is before the start of the file")
        if start + length > len(data):
            raise ModelError(f"truncated: the file has {len(data)} bytes, its buffers[{i}] ({length} bytes at "
                             f"{start}) needs {start + length}")
        out.append(np.frombuffer(data, np.uint8, length, start))  # zero-copy view
    return out


def _read_subgraph(g: Any, gi: int, buffers: list[np.ndarray], codes: list, data: bytes) -> Graph:
    n_t = g.TensorsLength()
    _check_count(n_t, data, f"subgraphs[{gi}].tensors")
    tensors = [_read_tensor(g.Tensors(i), i, gi, buffers, data) for i in range(n_t)]
    for i in range(n_t):
        _read_blockwise(g.Tensors(i), i, tensors, f"subgraphs[{gi}].tensors[{i}]")

    def indices(arr: np.ndarray, what: str, allow_optional: bool = False) -> list[int]:
        out = [int(x) for x in arr]
        for x in out:
            if not (0 <= x < n_t or (allow_optional and x == -1)):
                raise ModelError(f"subgraphs[{gi}].{what}: tensor index {x} out of range (0..{n_t - 1})")
        return out

    ops = []
    n_ops = g.OperatorsLength()
    _check_count(n_ops, data, f"subgraphs[{gi}].operators")
    for i in range(n_ops):
        o = g.Operators(i)
        ci = o.OpcodeIndex()
        if not 0 <= ci < len(codes):
            raise ModelError(f"subgraphs[{gi}].operators[{i}]: opcode index {ci} out of range "
                             f"(0..{len(codes) - 1})")
        name, builtin, custom, version = codes[ci]
        where = f"operators[{i}] ({name})"
        options = None
        otype = o.BuiltinOptionsType()
        if otype:
            kind = OPTION_NAMES.get(otype)
            if kind is None:
                raise ModelError(f"subgraphs[{gi}].{where}: unknown builtin options type {otype}")
            table = o.BuiltinOptions()
            if table is not None:
                options = _decode_options(kind, table)
        elif o.BuiltinOptions2Type():
            kind = OPTION2_NAMES.get(o.BuiltinOptions2Type(), "Unknown")
            table = o.BuiltinOptions2()
            if table is not None and kind in vars(tflite):
                options = _decode_options(kind, table)
        custom_options = None
        if o.CustomOptionsLength():
            custom_options = bytes(o.CustomOptionsAsNumpy())
        ops.append(Op(
            index=i, code=name, builtin_code=builtin, custom_code=custom, options=options,
            inputs=indices(_numpy(o.InputsAsNumpy, o.InputsLength()), f"{where}.inputs", True),
            outputs=indices(_numpy(o.OutputsAsNumpy, o.OutputsLength()), f"{where}.outputs"),
            intermediates=indices(_numpy(o.IntermediatesAsNumpy, o.IntermediatesLength()),
                                  f"{where}.intermediates"),
            custom_options=custom_options, version=version,
        ))
    name = g.Name()
    graph = Graph(
        tensors=tensors, ops=ops,
        inputs=indices(_numpy(g.InputsAsNumpy, g.InputsLength()), "inputs"),
        outputs=indices(_numpy(g.OutputsAsNumpy, g.OutputsLength()), "outputs"),
        name=name.decode("utf-8", "replace") if name else "",
    )
    # A zero-element tensor with its own buffer that no op writes and nobody feeds is a constant (e.g. the
    # shape [] of a RESHAPE to a scalar); its buffer is empty because there is nothing to store.
    produced = {t for op in ops for t in op.outputs}
    for t in tensors:
        if t.data is None and t.buffer != 0 and t.size == 0 and not t.is_variable \
                and t.index not in produced and t.index not in graph.inputs:
            t.data = np.zeros(t.shape, t.dtype)
    return graph


def _read_tensor(t: Any, i: int, gi: int, buffers: list[np.ndarray], data: bytes) -> Tensor:
    where = f"subgraphs[{gi}].tensors[{i}]"
    rank = t.ShapeLength()
    if rank > MAX_RANK:
        raise ModelError(f"{where}: rank {rank} exceeds {MAX_RANK}")
    shape = tuple(int(x) for x in _numpy(t.ShapeAsNumpy, rank))
    if any(d < 0 for d in shape):
        raise ModelError(f"{where}: negative dimension in shape {shape}")
    n_elem = int(np.prod(shape, dtype=np.float64)) if shape else 1
    if n_elem > MAX_ELEMENTS:
        raise ModelError(f"{where}: shape {shape} declares {n_elem} elements, more than any real model")
    sig = None
    if t.ShapeSignatureLength():
        if t.ShapeSignatureLength() != rank:
            raise ModelError(f"{where}: shape_signature rank differs from shape rank {rank}")
        sig = tuple(int(x) for x in t.ShapeSignatureAsNumpy())
        if any(d < -1 for d in sig):
            raise ModelError(f"{where}: invalid dimension in shape_signature {sig}")
    type_code = int(t.Type())
    if type_code not in TENSOR_TYPES:
        raise ModelError(f"{where}: unknown tensor type {type_code}")
    np_type = TENSOR_TYPES[type_code]
    dtype = np.dtype(np_type) if np_type is not None else np.dtype(np.uint8)
    b = int(t.Buffer())
    if not 0 <= b < max(len(buffers), 1):
        raise ModelError(f"{where}: buffer index {b} out of range (0..{len(buffers) - 1})")
    name = t.Name()
    name_s = name.decode("utf-8", "replace") if name else f"tensor_{i}"
    sparsity = _read_sparsity(t.Sparsity(), where, data) if t.Sparsity() is not None else None
    if sparsity is not None:
        _check_sparsity(sparsity, shape, where)
    tensor_data = None
    raw = buffers[b] if buffers else np.zeros(0, np.uint8)
    if raw.size:
        if sparsity is None and type_code == INT4 and raw.size != (n_elem + 1) // 2:  # INT4: two values a byte
            raise ModelError(f"{where} ({name_s!r}): buffer {b} holds {raw.size} bytes, shape {shape} of int4 "
                             f"needs {(n_elem + 1) // 2}")
        if sparsity is not None or type_code in (5, 13, 14, 17) or np_type is None:
            tensor_data = raw  # decoded later by the pass that needs it (DENSIFY, strings)
        else:
            expected = n_elem * dtype.itemsize
            if raw.size != expected:
                raise ModelError(f"{where} ({name_s!r}): buffer {b} holds {raw.size} bytes, "
                                 f"shape {shape} of {dtype} needs {expected}")
            tensor_data = raw.view(dtype).reshape(shape)
    q = t.Quantization()
    quant = None
    if q is not None and q.ScaleLength():
        quant = Quantization(
            scale=q.ScaleAsNumpy().astype(np.float32),
            zero_point=_numpy(q.ZeroPointAsNumpy, q.ZeroPointLength()).astype(np.int64),
            axis=int(q.QuantizedDimension()),
            min=q.MinAsNumpy() if q.MinLength() else None, max=q.MaxAsNumpy() if q.MaxLength() else None,
        )
        if quant.axis < 0 or (rank and quant.axis >= rank):
            raise ModelError(f"{where}: quantized_dimension {quant.axis} out of range for rank {rank}")
        n_scales = quant.scale.size
        # As LiteRT: one scale (per-tensor) or one per slice along the quantized dimension.
        if n_scales != 1 and rank and n_scales != shape[quant.axis]:
            raise ModelError(f"{where}: {n_scales} quantization scales for dimension {quant.axis} of shape "
                             f"{shape} (need 1 or {shape[quant.axis]})")
        if quant.zero_point.size not in (0, n_scales):
            raise ModelError(f"{where}: {quant.zero_point.size} quantization zero points for "
                             f"{n_scales} scales")
    return Tensor(index=i, name=name_s, shape=shape, dtype=dtype, shape_signature=sig, buffer=b,
                  data=tensor_data, quantization=quant, sparsity=sparsity, is_variable=bool(t.IsVariable()),
                  type_code=type_code)


# QuantizationDetails.BlockwiseQuantization: table {scales: int; zero_points: int; block_size: int}
BLOCKWISE_DETAILS = 2


def _read_blockwise(t: Any, i: int, tensors: list[Tensor], where: str) -> None:
    """Attach a BlockwiseQuantization's block size and scales (a float16 constant tensor of the same subgraph) to
    tensor i, which it quantizes."""
    q = t.Quantization()
    if q is None or q.DetailsType() != BLOCKWISE_DETAILS or q.Details() is None:
        return
    table = q.Details()

    def field(slot: int, default: int) -> int:
        off = table.Offset(4 + 2 * slot)
        return int(table.Get(flatbuffers.number_types.Int32Flags, off + table.Pos)) if off else default

    scales_t, zero_points_t, block = field(0, -1), field(1, -1), field(2, 0)
    target = tensors[i]
    if not 0 <= scales_t < len(tensors) or tensors[scales_t].data is None:
        raise ModelError(f"{where}: blockwise scales tensor {scales_t} is not a constant of the subgraph")
    if zero_points_t >= 0:
        raise ModelError(f"{where}: blockwise quantization with zero points is not supported (LiteRT has none)")
    scales = tensors[scales_t]
    rows, last = (target.shape[0], target.shape[-1]) if target.shape else (0, 0)
    if len(target.shape) != 2 or block <= 0 or last % block or tuple(scales.shape) != (rows, last // block):
        raise ModelError(f"{where}: blockwise scales {scales.shape} with block size {block} do not fit shape "
                         f"{target.shape}")
    if scales.dtype not in (np.float16, np.float32):
        raise ModelError(f"{where}: blockwise scales are {scales.dtype}, not float16")
    quant = target.quantization or Quantization(scale=np.zeros(0, np.float32), zero_point=np.zeros(0, np.int64))
    tensors[i] = dataclasses.replace(target, quantization=dataclasses.replace(
        quant, block_size=block, block_scales=np.asarray(scales.data).astype(np.float16).reshape(scales.shape)))


def _read_sparsity(s: Any, where: str, data: bytes) -> Sparsity:
    dims = []
    n = s.DimMetadataLength()
    _check_count(n, data, f"{where}.sparsity.dim_metadata")
    for j in range(n):
        d = s.DimMetadata(j)
        entry: dict[str, Any] = {"format": int(d.Format()), "dense_size": int(d.DenseSize())}
        for key, type_getter, getter in (("array_segments", d.ArraySegmentsType, d.ArraySegments),
                                         ("array_indices", d.ArrayIndicesType, d.ArrayIndices)):
            kind = type_getter()
            table = getter()
            if kind and table is not None:
                cls = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}.get(kind)
                if cls is None:
                    raise ModelError(f"{where}.sparsity: unknown index vector type {kind}")
                vec = cls()
                vec.Init(table.Bytes, table.Pos)
                values = vec.ValuesAsNumpy() if vec.ValuesLength() else np.zeros(0)
                entry[key] = values.astype(np.int64)
        dims.append(entry)
    return Sparsity(
        traversal_order=[int(x) for x in _numpy(s.TraversalOrderAsNumpy, s.TraversalOrderLength())],
        block_map=[int(x) for x in _numpy(s.BlockMapAsNumpy, s.BlockMapLength())],
        dim_metadata=dims,
    )


def _check_sparsity(sp: Sparsity, shape: tuple[int, ...], where: str) -> None:
    """The structure TFLite's FormatConverter relies on, so densifying can never index out of range."""
    rank, order, dims = len(shape), sp.traversal_order, sp.dim_metadata
    n = len(order)
    if n != len(dims) or n != rank + len(sp.block_map) or sorted(order) != list(range(n)):
        raise ModelError(f"{where}.sparsity: traversal_order {order} does not fit {len(dims)} dim_metadata "
                         f"entries, rank {rank} and block_map {sp.block_map}")
    if len(set(sp.block_map)) != len(sp.block_map) or any(not 0 <= d < rank for d in sp.block_map):
        raise ModelError(f"{where}.sparsity: block_map {sp.block_map} is not a set of dimensions of "
                         f"rank {rank}")
    block = {d: 1 for d in range(rank)}
    for j, d in enumerate(sp.block_map):
        meta = dims[order.index(rank + j)]
        size = meta["dense_size"]
        if meta["format"] != 0 or size <= 0 or shape[d] % size:
            raise ModelError(f"{where}.sparsity: block dimension {j} (size {size}) does not tile "
                             f"dimension {d} of shape {shape}")
        block[d] = size
    count = 1  # stored entries reaching this level
    for level, meta in enumerate(dims):
        k = order[level]
        size = shape[k] // block[k] if k < rank else block[sp.block_map[k - rank]]
        if meta["format"] == 0:
            if meta["dense_size"] != size:
                raise ModelError(f"{where}.sparsity: dense level {level} has size {meta['dense_size']}, "
                                 f"expected {size}")
            count *= size
            continue
        if meta["format"] != 1:
            raise ModelError(f"{where}.sparsity: unknown dimension format {meta['format']} at level {level}")
        segs, inds = meta.get("array_segments"), meta.get("array_indices")
        if segs is None or inds is None:
            raise ModelError(f"{where}.sparsity: sparse level {level} lacks array_segments or array_indices")
        if segs.size != count + 1 or segs[0] != 0 or np.any(np.diff(segs) < 0) or segs[-1] != inds.size:
            raise ModelError(f"{where}.sparsity: array_segments of level {level} are inconsistent "
                             f"({segs.size} segments for {count} entries, {inds.size} indices)")
        if inds.size and (inds.min() < 0 or inds.max() >= size):
            raise ModelError(f"{where}.sparsity: array_indices of level {level} out of range (0..{size - 1})")
        count = int(inds.size)
