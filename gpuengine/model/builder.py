"""IR -> .tflite bytes, and a small fluent ModelBuilder: tests, the zoo and CPU-partition sub-models use it.

No TensorFlow needed: it writes the flatbuffer with the `tflite` schema bindings.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import inspect
import re
from typing import Any

import flatbuffers
import numpy as np
from tflite.ActivationFunctionType import ActivationFunctionType
from tflite.BuiltinOperator import BuiltinOperator
from tflite.Padding import Padding

from .ir import DTYPE_TO_TYPE, Graph, Model, Op, Options, Quantization, SignatureDef, Tensor
from .quantization import INT4, pack_int4
from .reader import OPTION2_NAMES, OPTION_NAMES, option_fields

# Ops whose options table name is not the CamelCase of the op name.
_OPTIONS_OVERRIDES = {
    "MAX_POOL_2D": "Pool2DOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions",
    "LESS": "LessOptions", "SELECT_V2": "SelectV2Options", "LEAKY_RELU": "LeakyReluOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions", "CONCATENATION": "ConcatenationOptions",
    "L2_NORMALIZATION": "L2NormOptions", "LOCAL_RESPONSE_NORMALIZATION": "LocalResponseNormalizationOptions",
    "SPACE_TO_BATCH_ND": "SpaceToBatchNDOptions", "BATCH_TO_SPACE_ND": "BatchToSpaceNDOptions",
    "PADV2": "PadV2Options", "LOG_SOFTMAX": "LogSoftmaxOptions", "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
    "TRANSPOSE_CONV": "TransposeConvOptions", "BATCH_MATMUL": "BatchMatMulOptions",
}
_ENUMS = {
    "padding": {k: v for k, v in vars(Padding).items() if not k.startswith("_")},
    "fused_activation_function": {k: v for k, v in vars(ActivationFunctionType).items() if not k.startswith("_")},
}
_OPTION_CODES = {name: code for code, name in OPTION_NAMES.items()}
# Options tables stored in the operator's second union (BuiltinOptions2): StableHLO ops, composites among them.
_OPTION2_CODES = {name: code for code, name in OPTION2_NAMES.items() if name != "NONE"}
# The lowest operator version LiteRT 2.3 registers a builtin with, where it is above 1 (register.cc: version 1
# of BROADCAST_TO was rolled back when its code changed); a file that says less cannot be resolved.
MIN_VERSIONS = {"BROADCAST_TO": 2}


def op_version(op: Op) -> int:
    """The version an op's code is written with: the one the reader saw, raised to the minimum LiteRT accepts."""
    return max(int(getattr(op, "version", 1) or 1), MIN_VERSIONS.get(op.code, 1) if not op.is_custom else 1)


def options_kind(op_name: str) -> str | None:
    """The options table an op is written with, or None when the op takes none."""
    if op_name in _OPTIONS_OVERRIDES:
        return _OPTIONS_OVERRIDES[op_name]
    want = op_name.replace("_", "").lower() + "options"
    for kind in [*_OPTION_CODES, *_OPTION2_CODES]:
        if kind.lower() == want:
            return kind
    return None


def make_options(op_name: str, values: dict[str, Any] | None) -> Options | None:
    """Options from friendly values: enums by name ('SAME', 'RELU6') or number; unknown fields rejected."""
    kind = options_kind(op_name)
    if kind is None:
        if values:
            raise ValueError(f"{op_name} takes no builtin options, got {sorted(values)}")
        return None
    known = {name for _, name, _ in option_fields(kind)}
    fields: dict[str, Any] = {}
    for key, value in (values or {}).items():
        if key not in known:
            raise ValueError(f"{kind} has no field {key!r}; fields: {sorted(known)}")
        if isinstance(value, str) and key in _ENUMS:
            value = _ENUMS[key][value.upper()]
        fields[key] = value
    return Options(kind, fields)


def _schema_module(kind: str) -> Any:
    return importlib.import_module(f"tflite.{kind}")


@functools.cache
def _vector_element_size(kind: str, accessor: str) -> int:
    """Bytes per element of an options vector, read from the schema module's Start...Vector function."""
    mod = _schema_module(kind)
    start = getattr(mod, f"{kind}Start{accessor}Vector", None) or getattr(mod, f"Start{accessor}Vector")
    source = inspect.getsource(start)
    found = re.search(r"StartVector\((\d+)", source)
    return int(found.group(1)) if found else 4


def _write_options(b: flatbuffers.Builder, options: Options) -> int:
    """Scalars, strings (bytes as the reader gives them) and vectors of 1-, 2-, 4- or 8-byte integers."""
    mod = _schema_module(options.kind)
    offsets = {}
    for accessor, name, is_vector in option_fields(options.kind):
        value = options.fields.get(name)
        if is_vector and value is not None:
            values = [int(v) for v in value]
            size = _vector_element_size(options.kind, accessor)
            getattr(mod, f"Start{accessor}Vector")(b, len(values))
            signed = any(v < 0 for v in values)
            prepend = {1: b.PrependInt8 if signed else b.PrependUint8, 2: b.PrependInt16 if signed else b.PrependUint16,
                       8: b.PrependInt64}.get(size, b.PrependInt32)
            for v in reversed(values):
                prepend(v)
            offsets[accessor] = b.EndVector()
        elif isinstance(value, (bytes, str)):
            offsets[accessor] = b.CreateString(value)
    mod.Start(b)
    for accessor, name, _ in option_fields(options.kind):
        if accessor in offsets:
            getattr(mod, f"Add{accessor}")(b, offsets[accessor])
        elif name in options.fields and options.fields[name] is not None and not isinstance(options.fields[name],
                                                                                             (list, tuple)):
            getattr(mod, f"Add{accessor}")(b, options.fields[name])
    return mod.End(b)


def _int_vector(b: flatbuffers.Builder, values: Any) -> int:
    values = list(values)
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        b.PrependInt32(int(v))
    return b.EndVector()


def _table_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    """A vector of tables (already written) by their offsets."""
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _typed_vector(b: flatbuffers.Builder, arr: np.ndarray, alignment: int = 16) -> int:
    data = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
    b.StartVector(1, data.size, alignment)
    b.head = b.head - data.size
    b.Bytes[b.head:b.head + data.size] = data.tobytes()
    return b.EndVector()


def write_model(model: Model) -> bytes:
    """Serialize an IR model. Constant tensors get a buffer each; sparse tensors must be densified first."""
    b = flatbuffers.Builder(1024)
    buffers: list[np.ndarray | None] = [None]  # buffer 0 is the empty sentinel
    # Constants with equal bytes share one buffer, as converters write them: the signatures of a language model
    # (prefill_N, decode) read the same weights from tensors of their own subgraphs.
    shared: dict[tuple[str, bytes], int] = {}
    codes: dict[tuple[int, str | None, int], int] = {}
    subgraph_offsets = []
    for graph, scales_of in map(_with_block_scale_tensors, model.subgraphs):
        tensor_buffers = []
        for t in graph.tensors:
            if t.sparsity is not None:
                raise ValueError(f"tensor {t.name!r} is sparse; densify it before writing")
            if t.data is not None:
                arr = np.asarray(t.data)
                key = (arr.dtype.str, hashlib.sha256(np.ascontiguousarray(arr).view(np.uint8).reshape(-1)).digest())
                if arr.size == 0 or key not in shared:
                    buffers.append(arr)
                    shared.setdefault(key, len(buffers) - 1)
                tensor_buffers.append(shared[key] if arr.size else len(buffers) - 1)
            else:
                tensor_buffers.append(0)
        for op in graph.ops:
            codes.setdefault(_code_key(op), len(codes))
        subgraph_offsets.append(_write_subgraph(b, graph, tensor_buffers, codes, scales_of))
    metadata_entries = []
    for name, blob in model.metadata.items():
        buffers.append(np.frombuffer(blob, np.uint8))
        metadata_entries.append((name, len(buffers) - 1))

    buffer_offsets = []
    for arr in buffers:
        data_off = _typed_vector(b, arr) if arr is not None and arr.size else None
        _schema_module("Buffer").Start(b)
        if data_off is not None:
            _schema_module("Buffer").AddData(b, data_off)
        buffer_offsets.append(_schema_module("Buffer").End(b))

    code_offsets = []
    oc_mod = _schema_module("OperatorCode")
    for (builtin, custom, version), _ in sorted(codes.items(), key=lambda kv: kv[1]):
        custom_off = b.CreateString(custom) if custom is not None else None
        oc_mod.Start(b)
        oc_mod.AddDeprecatedBuiltinCode(b, min(builtin, BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES))
        oc_mod.AddBuiltinCode(b, builtin)
        oc_mod.AddVersion(b, version)
        if custom_off is not None:
            oc_mod.AddCustomCode(b, custom_off)
        code_offsets.append(oc_mod.End(b))

    md_mod = _schema_module("Metadata")
    metadata_offsets = []
    for name, buf_index in metadata_entries:
        name_off = b.CreateString(name)
        md_mod.Start(b)
        md_mod.AddName(b, name_off)
        md_mod.AddBuffer(b, buf_index)
        metadata_offsets.append(md_mod.End(b))

    sig_offsets = [_write_signature(b, s) for s in model.signatures]

    subgraphs_vec = _table_vector(b, subgraph_offsets)
    codes_vec = _table_vector(b, code_offsets)
    buffers_vec = _table_vector(b, buffer_offsets)
    metadata_vec = _table_vector(b, metadata_offsets) if metadata_offsets else None
    sig_vec = _table_vector(b, sig_offsets) if sig_offsets else None
    desc = b.CreateString(model.description or "gpuengine")
    m = _schema_module("Model")
    m.Start(b)
    m.AddVersion(b, 3)
    m.AddOperatorCodes(b, codes_vec)
    m.AddSubgraphs(b, subgraphs_vec)
    m.AddDescription(b, desc)
    m.AddBuffers(b, buffers_vec)
    if metadata_vec is not None:
        m.AddMetadata(b, metadata_vec)
    if sig_vec is not None:
        m.AddSignatureDefs(b, sig_vec)
    b.Finish(m.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _code_key(op: Op) -> tuple[int, str | None, int]:
    return (op.builtin_code, op.custom_code, op_version(op))


def _float_vector(b: flatbuffers.Builder, values: np.ndarray) -> int:
    values = np.asarray(values, np.float32).reshape(-1)
    b.StartVector(4, values.size, 4)
    for v in reversed(values.tolist()):
        b.PrependFloat32(v)
    return b.EndVector()


BLOCKWISE_DETAILS = 2  # QuantizationDetails.BlockwiseQuantization


def _with_block_scale_tensors(graph: Graph) -> tuple[Graph, dict[int, int]]:
    """The graph with a float16 constant holding each blockwise-quantized tensor's scales appended (the schema keeps
    them in a tensor the quantization details name), and the map tensor -> its scales tensor."""
    extra: list[Tensor] = []
    scales_of: dict[int, int] = {}
    for i, t in enumerate(graph.tensors):
        if t.quantization is not None and t.quantization.blockwise:
            scales = np.ascontiguousarray(t.quantization.block_scales, np.float16)
            scales_of[i] = len(graph.tensors) + len(extra)
            extra.append(Tensor(index=scales_of[i], name=f"{t.name}/block_scales", shape=tuple(scales.shape),
                                dtype=np.dtype(np.float16), data=scales))
    return (dataclasses.replace(graph, tensors=[*graph.tensors, *extra]) if extra else graph), scales_of


def _write_blockwise(b: flatbuffers.Builder, scales_tensor: int, block_size: int) -> int:
    """table BlockwiseQuantization { scales: int; zero_points: int; block_size: int } (no zero points: -1)."""
    b.StartObject(3)
    b.PrependInt32Slot(0, scales_tensor, -1)
    b.PrependInt32Slot(1, -1, 0)
    b.PrependInt32Slot(2, block_size, 0)
    return b.EndObject()


def _write_quantization(b: flatbuffers.Builder, q: Quantization, scales_tensor: int = -1) -> int:
    qm = _schema_module("QuantizationParameters")
    details = _write_blockwise(b, scales_tensor, q.block_size) if q.blockwise else None
    scale_vec = _float_vector(b, q.scale)
    min_vec = _float_vector(b, q.min) if q.min is not None else None
    max_vec = _float_vector(b, q.max) if q.max is not None else None
    b.StartVector(8, q.zero_point.size, 8)
    for v in reversed(q.zero_point.astype(np.int64).tolist()):
        b.PrependInt64(v)
    zp_vec = b.EndVector()
    qm.Start(b)
    if min_vec is not None:
        qm.AddMin(b, min_vec)
    if max_vec is not None:
        qm.AddMax(b, max_vec)
    qm.AddScale(b, scale_vec)
    qm.AddZeroPoint(b, zp_vec)
    if details is not None:
        qm.AddDetailsType(b, BLOCKWISE_DETAILS)
        qm.AddDetails(b, details)
    qm.AddQuantizedDimension(b, q.axis)
    return qm.End(b)


def _write_subgraph(b: flatbuffers.Builder, graph: Graph, tensor_buffers: list[int],
                    codes: dict[tuple[int, str | None, int], int], scales_of: dict[int, int] | None = None) -> int:
    tm = _schema_module("Tensor")
    tensor_offsets = []
    for i, (t, buf) in enumerate(zip(graph.tensors, tensor_buffers)):
        name = b.CreateString(t.name)
        shape = _int_vector(b, t.shape)
        sig = _int_vector(b, t.shape_signature) if t.shape_signature is not None else None
        scales_t = (scales_of or {}).get(i, -1)
        quant = _write_quantization(b, t.quantization, scales_t) if t.quantization is not None else None
        tm.Start(b)
        tm.AddShape(b, shape)
        tm.AddType(b, DTYPE_TO_TYPE[np.dtype(t.dtype)] if t.type_code == 0 else t.type_code)
        tm.AddBuffer(b, buf)
        tm.AddName(b, name)
        if quant is not None:
            tm.AddQuantization(b, quant)
        if t.is_variable:
            tm.AddIsVariable(b, True)
        if sig is not None:
            tm.AddShapeSignature(b, sig)
        tensor_offsets.append(tm.End(b))
    om = _schema_module("Operator")
    op_offsets = []
    for op in graph.ops:
        ins = _int_vector(b, op.inputs)
        outs = _int_vector(b, op.outputs)
        intermediates = _int_vector(b, op.intermediates) if op.intermediates else None
        has_options = op.options is not None and op.options.fields is not None
        opts = _write_options(b, op.options) if has_options and op.options.kind in _OPTION_CODES else None
        opts2 = _write_options(b, op.options) if has_options and op.options.kind in _OPTION2_CODES else None
        custom = _typed_vector(b, np.frombuffer(op.custom_options, np.uint8), 1) if op.custom_options else None
        om.Start(b)
        om.AddOpcodeIndex(b, codes[_code_key(op)])
        om.AddInputs(b, ins)
        om.AddOutputs(b, outs)
        if opts is not None:
            om.AddBuiltinOptionsType(b, _OPTION_CODES[op.options.kind])
            om.AddBuiltinOptions(b, opts)
        if opts2 is not None:
            om.AddBuiltinOptions2Type(b, _OPTION2_CODES[op.options.kind])
            om.AddBuiltinOptions2(b, opts2)
        if custom is not None:
            om.AddCustomOptions(b, custom)
        if intermediates is not None:
            om.AddIntermediates(b, intermediates)
        op_offsets.append(om.End(b))

    tensors_vec = _table_vector(b, tensor_offsets)
    ops_vec = _table_vector(b, op_offsets)
    ins = _int_vector(b, graph.inputs)
    outs = _int_vector(b, graph.outputs)
    name = b.CreateString(graph.name or "main")
    sg = _schema_module("SubGraph")
    sg.Start(b)
    sg.AddTensors(b, tensors_vec)
    sg.AddInputs(b, ins)
    sg.AddOutputs(b, outs)
    sg.AddOperators(b, ops_vec)
    sg.AddName(b, name)
    return sg.End(b)


def _write_signature(b: flatbuffers.Builder, sig: Any) -> int:
    tmm = _schema_module("TensorMap")

    def maps(items: dict[str, int]) -> int:
        offs = []
        for name, idx in items.items():
            n = b.CreateString(name)
            tmm.Start(b)
            tmm.AddName(b, n)
            tmm.AddTensorIndex(b, idx)
            offs.append(tmm.End(b))
        return _table_vector(b, offs)

    ins, outs = maps(sig.inputs), maps(sig.outputs)
    key = b.CreateString(sig.key)
    sm = _schema_module("SignatureDef")
    sm.Start(b)
    sm.AddInputs(b, ins)
    sm.AddOutputs(b, outs)
    sm.AddSignatureKey(b, key)
    sm.AddSubgraphIndex(b, sig.subgraph)
    return sm.End(b)


class ModelBuilder:
    """Build a model op by op; output shapes are given by the caller (no shape inference).

    >>> mb = ModelBuilder()
    >>> x = mb.input("x", (1, 8, 8, 3))
    >>> y = mb.op("RELU", [x], (1, 8, 8, 3))
    >>> mb.output(y); data = mb.build()

    Control flow: build each called subgraph with a ModelBuilder of its own, add it to the model's builder with
    `add_subgraph` (which returns its index in the model) and name that index in the calling op's options, e.g.
    `mb.op("WHILE", [i, x], [(), (1, 4)], {"cond_subgraph_index": c, "body_subgraph_index": b})`.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.signatures: list[Any] = []
        self.subgraphs: list[ModelBuilder] = []  # subgraphs 1, 2, ... of the model (0 is this one)

    def tensor(self, name: str, shape: tuple[int, ...], dtype: Any = np.float32, data: np.ndarray | None = None,
               quantization: Quantization | None = None, shape_signature: tuple[int, ...] | None = None) -> int:
        if data is not None:
            data = np.ascontiguousarray(data, dtype=dtype).reshape(shape)
        sig = tuple(int(d) for d in shape_signature) if shape_signature is not None else None
        self.tensors.append(Tensor(index=len(self.tensors), name=name, shape=tuple(int(d) for d in shape),
                                   dtype=np.dtype(dtype), data=data, quantization=quantization, shape_signature=sig))
        return len(self.tensors) - 1

    def input(self, name: str, shape: tuple[int, ...], dtype: Any = np.float32,
              shape_signature: tuple[int, ...] | None = None) -> int:
        """A graph input; shape_signature marks dimensions that may be resized with -1 (shape holds the default)."""
        index = self.tensor(name, shape, dtype, shape_signature=shape_signature)
        self.inputs.append(index)
        return index

    def const(self, name: str, data: Any, dtype: Any = None, quantization: Quantization | None = None) -> int:
        arr = np.asarray(data, dtype=dtype)
        return self.tensor(name, arr.shape, arr.dtype, arr, quantization)

    def int4_const(self, name: str, values: Any, quantization: Quantization) -> int:
        """A constant INT4 tensor (type 17): `values` in -8..7, written two a byte, the first in the low nibble;
        `quantization` per channel or blockwise (Quantization.block_size / block_scales)."""
        values = np.asarray(values)
        index = self.const(name, pack_int4(values).view(np.int8), np.int8, quantization)
        self.tensors[index] = dataclasses.replace(self.tensors[index], shape=tuple(values.shape), type_code=INT4)
        return index

    def op(self, code: str, inputs: list[int], shape: tuple[int, ...] | list[tuple[int, ...]],
           options: dict[str, Any] | None = None, dtype: Any = np.float32, custom_options: bytes | None = None,
           name: str | None = None, shape_signature: tuple[int, ...] | list[tuple[int, ...]] | None = None,
           version: int = 1) -> int | list[int]:
        """Append an op; `shape` is one output shape or a list of them (then a list of indices returns); `dtype`
        one type or a list (one per output); `version` the operator code's version written in the file."""
        shapes = shape if isinstance(shape, list) else [shape]
        dtypes = dtype if isinstance(dtype, list) else [dtype] * len(shapes)
        sigs = shape_signature if isinstance(shape_signature, list) else [shape_signature] * len(shapes)
        outs = [self.tensor(f"{name or code.lower()}_{len(self.ops)}_{k}", s, dt, shape_signature=sig)
                for k, (s, dt, sig) in enumerate(zip(shapes, dtypes, sigs))]
        builtin = getattr(BuiltinOperator, code, None)
        custom = None
        if builtin is None:
            builtin, custom = BuiltinOperator.CUSTOM, code
        self.ops.append(Op(index=len(self.ops), code=code, inputs=list(inputs), outputs=outs,
                           options=make_options(code, options) if custom is None else None,
                           builtin_code=builtin, custom_code=custom, custom_options=custom_options,
                           version=version))
        return outs if isinstance(shape, list) else outs[0]

    def composite(self, name: str, inputs: list[int], shape: tuple[int, ...], decomposition: ModelBuilder,
                  attributes: dict[str, Any] | None = None, op_name: str | None = None,
                  owner: ModelBuilder | None = None) -> int:
        """A STABLEHLO_COMPOSITE op named `name` (e.g. "odml.rms_norm") with one float output; `decomposition`
        (inputs and outputs in the composite's order) becomes a subgraph of the model: of `owner`, the model's
        builder, when this builder is one of its other subgraphs. `attributes` are written as a FlexBuffer map, as
        litert-torch writes them."""
        from flatbuffers import flexbuffers

        index = (owner or self).add_subgraph(decomposition)
        result = self.op("STABLEHLO_COMPOSITE", inputs, shape, {
            "name": name, "decomposition_subgraph_index": index, "composite_attributes_format": 0, "version": 0,
            "composite_attributes": list(flexbuffers.Dumps(attributes)) if attributes else None,
        }, name=op_name or name)
        assert isinstance(result, int)
        return result

    def signature(self, key: str, subgraph: int, inputs: dict[str, int], outputs: dict[str, int]) -> None:
        """A SignatureDef: `subgraph` 0 is this builder's graph, 1.. those added with add_subgraph; tensors by
        index in that subgraph."""
        self.signatures.append(SignatureDef(key, subgraph, dict(inputs), dict(outputs)))

    def output(self, *indices: int) -> None:
        self.outputs.extend(indices)

    def add_subgraph(self, sub: ModelBuilder) -> int:
        """Append `sub` as a subgraph of this model (this builder is subgraph 0); returns its index."""
        self.subgraphs.append(sub)
        return len(self.subgraphs)

    def graph(self) -> Graph:
        return Graph(tensors=self.tensors, ops=self.ops, inputs=self.inputs, outputs=self.outputs, name=self.name)

    def to_model(self) -> Model:
        return Model(subgraphs=[self.graph(), *(s.graph() for s in self.subgraphs)], signatures=list(self.signatures))

    def build(self) -> bytes:
        return write_model(self.to_model())


def give_bias(op: Op, tensors: list[Tensor]) -> None:
    """A float conv without bias gets a zero one before LiteRT runs it (the CPU fallback, constant folding): LiteRT
    2.3 refuses a CONV_2D without it and a DEPTHWISE_CONV_2D with two inputs crashes it (it reads a third input
    that is not there); the GPU kernels take either."""
    if op.code not in ("CONV_2D", "DEPTHWISE_CONV_2D") or (len(op.inputs) > 2 and op.inputs[2] >= 0):
        return
    x, w = tensors[op.inputs[0]], tensors[op.inputs[1]]
    if x.dtype != np.float32 or len(w.shape) != 4:
        return
    channels = w.shape[0] if op.code == "CONV_2D" else w.shape[3]
    tensors.append(Tensor(index=len(tensors), name=f"{op.code.lower()}_{op.index}_zero_bias", shape=(channels,),
                          dtype=np.dtype(np.float32), data=np.zeros(channels, np.float32)))
    op.inputs = [*op.inputs[:2], len(tensors) - 1]
