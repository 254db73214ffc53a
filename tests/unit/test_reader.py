"""Reader robustness: every mutated .tflite either parses to a valid Model or raises ModelError.

The mutation loops run in a child process with a timeout, so a hang or a crash of the reader fails a test
instead of taking pytest down. Targeted corruptions (out-of-range indices, bad shapes, short buffers) are
written with ModelBuilder / write_model and byte patches, and checked for the exact complaint.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tflite
from gpuengine.tools import fetch

from gpuengine import Interpreter, ModelError
from gpuengine.model.builder import ModelBuilder, write_model
from gpuengine.model.ir import Graph, Model, Quantization, SignatureDef
from gpuengine.model.reader import read_model

FACE = "face_detection_short_range"
SPARSE = "face_detection_full_range_sparse"
CHILD_TIMEOUT_S = 120  # generous for a shared 2-core machine; a healthy run takes a few seconds


def model_bytes(name: str) -> bytes:
    try:
        return fetch.model_path(name).read_bytes()
    except fetch.ModelsUnavailable as e:
        pytest.skip(f"reference models unavailable: {e}")


def face_model_bytes() -> bytes:
    return model_bytes(FACE)


def small_model() -> Model:
    """A model touching every part of the format the reader decodes: options with enums and vectors,
    constants, per-channel quantization, a custom op with custom_options, a signature def and metadata."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 3))
    w = mb.const("w", np.arange(4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3) / 100)
    bias = mb.const("bias", np.linspace(-1, 1, 4, dtype=np.float32))
    conv = mb.op("CONV_2D", [x, w, bias], (1, 8, 8, 4),
                 options={"padding": "SAME", "stride_w": 1, "stride_h": 1,
                          "fused_activation_function": "RELU6"})
    flat = mb.op("RESHAPE", [conv], (1, 256), options={"new_shape": [1, 256]})
    soft = mb.op("SOFTMAX", [flat], (1, 256), options={"beta": 1.0})
    mb.tensor("qw", (4, 2), np.int8, data=np.arange(8, dtype=np.int8).reshape(4, 2),
              quantization=Quantization(np.array([0.1, 0.2, 0.3, 0.4], np.float32), np.zeros(4, np.int64), 0))
    custom = mb.op("MyCustomOp", [soft], (1, 256), custom_options=b"\x01\x02\x03\x04")
    mb.output(soft, custom)
    mb.signatures.append(SignatureDef("serving_default", 0, {"x": x}, {"y": soft}))
    model = mb.to_model()
    model.metadata = {"min_runtime_version": b"1.5.0\x00", "notes": b"hello"}
    return model


# --------------------------------------------------------------------------------------------------------
# The child process: mutates a model and reads every variant. Prints one JSON line with the failures.
# --------------------------------------------------------------------------------------------------------
_CHILD = r'''
import json, sys, time
import numpy as np
import tflite
from gpuengine.errors import ModelError
from gpuengine.model.ir import Model
from gpuengine.model.reader import read_model

cfg = json.loads(sys.argv[1])
data = open(cfg["path"], "rb").read()
rng = np.random.default_rng(cfg["seed"])
n = len(data)


def structural_positions():
    """Byte positions outside the tensors' weight data: where corruption hits tables, offsets and counts."""
    m = tflite.Model.GetRootAsModel(data, 0)
    mask = np.ones(n, bool)
    for i in range(m.BuffersLength()):
        b = m.Buffers(i)
        if b.DataLength():
            start = b._tab.Vector(4)
            mask[start:start + b.DataLength()] = False
    return np.flatnonzero(mask)


def cases():
    kinds = set(cfg["kinds"])
    if "truncate" in kinds:
        lengths = set(range(min(n, 64))) | {n - k for k in range(1, 17)}
        if cfg.get("all_lengths"):
            lengths |= set(range(n))
        else:
            lengths |= {int(x) for x in np.linspace(0, n - 1, 60)} | {int(x) for x in rng.integers(0, n, 40)}
        for length in sorted(lengths):
            yield f"truncate:{length}", data[:length]
    if "random" in kinds:
        for k in range(cfg["random"]):
            length = int(rng.integers(0, 4096))
            blob = bytearray(rng.integers(0, 256, length, dtype=np.uint8).tobytes())
            if k % 2 and length >= 8:  # past the identifier check, so the table decoding sees the noise
                blob[4:8] = b"TFL3"
                blob[0:4] = int(rng.integers(8, max(length, 9))).to_bytes(4, "little")
            yield f"random:{k}:{length}", bytes(blob)
    positions = structural_positions()
    if "flip_every" in kinds:
        for p in range(n):
            b = bytearray(data); b[p] ^= 0xFF
            yield f"flip_every:{p}", bytes(b)
    if "flip" in kinds:
        for k in range(cfg["flips"]):
            b = bytearray(data)
            where = [int(p) for p in rng.choice(positions, int(rng.integers(1, 4)))]
            for p in where:
                b[p] ^= 1 << int(rng.integers(0, 8))
            yield f"flip:{k}:{where}", bytes(b)
    if "word" in kinds:
        specials = [0, 1, 0x7F, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, n, n - 4, n + 4]
        aligned = positions[(positions % 4 == 0) & (positions + 4 <= n)]
        for k in range(cfg["words"]):
            p = int(rng.choice(aligned))
            v = specials[k % len(specials)] if k % 3 else int(rng.integers(0, 2**32))
            b = bytearray(data); b[p:p + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")
            yield f"word:{p}={v:#x}", bytes(b)


def check(model):
    """Invariants every successfully read Model must satisfy."""
    assert isinstance(model, Model) and model.subgraphs
    for g in model.subgraphs:
        nt = len(g.tensors)
        for i, t in enumerate(g.tensors):
            assert t.index == i
            assert all(isinstance(d, int) and d >= 0 for d in t.shape), t.shape
            if t.data is not None and t.sparsity is None and t.type_code not in (5, 13, 14, 17):
                assert t.data.shape == t.shape and t.data.dtype == t.dtype, (t.name, t.data.shape, t.shape)
            if t.quantization is not None:
                assert 0 <= t.quantization.axis < max(len(t.shape), 1)
        for op in g.ops:
            assert all(-1 <= x < nt for x in op.inputs), op.inputs
            assert all(0 <= x < nt for x in op.outputs + op.intermediates)
            assert isinstance(op.code, str) and op.code
        assert all(0 <= x < nt for x in g.inputs + g.outputs)
    for s in model.signatures:
        assert 0 <= s.subgraph < len(model.subgraphs)
        nt = len(model.subgraphs[s.subgraph].tensors)
        assert all(0 <= x < nt for x in list(s.inputs.values()) + list(s.outputs.values()))
    assert all(isinstance(v, bytes) for v in model.metadata.values())


failures, counts, slowest = [], {"ok": 0, "model_error": 0}, (0.0, "")
for label, blob in cases():
    sys.stderr.write(label + "\n"); sys.stderr.flush()  # the last line names the culprit of a hang or crash
    t0 = time.perf_counter()
    try:
        model = read_model(blob)
    except ModelError as e:
        counts["model_error"] += 1
        if not str(e):
            failures.append([label, "ModelError with an empty message"])
    except BaseException as e:
        failures.append([label, f"{type(e).__name__}: {e}"[:300]])
    else:
        counts["ok"] += 1
        try:
            check(model)
        except Exception as e:
            failures.append([label, f"parsed to an invalid Model: {type(e).__name__}: {e}"[:300]])
    dt = time.perf_counter() - t0
    slowest = max(slowest, (dt, label))
print(json.dumps({"failures": failures, "counts": counts, "slowest": slowest}))
'''


def run_child(path: Path, timeout: float = CHILD_TIMEOUT_S, **cfg: Any) -> dict[str, Any]:
    cfg = {"path": str(path), "seed": 0, "random": 0, "flips": 0, "words": 0, **cfg}
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        last = err.strip().splitlines()[-1:] or ["<before the first case>"]
        pytest.fail(f"reader hung: no result after {timeout} s; last case started: {last[0]}")
    last = proc.stderr.strip().splitlines()[-1:] or ["<none>"]
    assert proc.returncode == 0, f"reader crashed the child (rc {proc.returncode}) at case {last[0]}:\n" \
                                 f"{proc.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not result["failures"], f"{len(result['failures'])} mutations escaped: {result['failures'][:10]}"
    assert result["slowest"][0] < 5.0, f"one read took {result['slowest'][0]:.1f} s: {result['slowest'][1]}"
    return result


@pytest.fixture(scope="module")
def small_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reader") / "small.tflite"
    path.write_bytes(write_model(small_model()))
    return path


@pytest.fixture(scope="module")
def face_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reader") / "face.tflite"
    path.write_bytes(face_model_bytes())
    return path


# -- the fixtures themselves are sound -------------------------------------------------------------------
def test_small_model_round_trips() -> None:
    model = read_model(write_model(small_model()))
    g = model.main
    assert [op.code for op in g.ops] == ["CONV_2D", "RESHAPE", "SOFTMAX", "MyCustomOp"]
    assert g.ops[0].opt("padding") == tflite.Padding.SAME
    assert g.ops[1].opt("new_shape") == [1, 256]
    assert g.ops[3].custom_options == b"\x01\x02\x03\x04"
    q = g.tensors[6].quantization
    assert q is not None and q.per_channel and np.allclose(q.scale, [0.1, 0.2, 0.3, 0.4])
    assert model.signatures[0].key == "serving_default"
    assert model.metadata == {"min_runtime_version": b"1.5.0\x00", "notes": b"hello"}


@pytest.mark.models
def test_face_model_reads() -> None:
    model = read_model(face_model_bytes())
    g = model.main
    assert len(g.ops) > 100 and len(g.inputs) == 1 and len(g.outputs) == 2
    assert g.tensors[g.inputs[0]].shape == (1, 128, 128, 3)
    assert {g.tensors[t].shape for t in g.outputs} == {(1, 896, 16), (1, 896, 1)}
    assert sum(t.is_constant for t in g.tensors) > 50


# -- mutation loops (child process) ----------------------------------------------------------------------
def test_small_model_every_truncation_and_every_byte_flip(small_path: Path) -> None:
    result = run_child(small_path, kinds=["truncate", "flip_every"], all_lengths=True)
    n = small_path.stat().st_size
    assert sum(result["counts"].values()) == 2 * n
    # Truncation everywhere must be refused (the root table sits at the start, data at the end).
    assert result["counts"]["model_error"] >= n


def test_small_model_random_corruption(small_path: Path) -> None:
    result = run_child(small_path, kinds=["random", "flip", "word"], random=100, flips=300, words=300, seed=1)
    assert result["counts"]["model_error"] > 100  # the mutations really reach the decoder


@pytest.mark.models
def test_face_model_mutations(face_path: Path) -> None:
    result = run_child(face_path, kinds=["truncate", "flip", "word"], flips=150, words=150, seed=2)
    assert result["counts"]["model_error"] > 100


@pytest.mark.models
def test_sparse_model_mutations(tmp_path: Path) -> None:
    path = tmp_path / "sparse.tflite"
    path.write_bytes(model_bytes(SPARSE))
    result = run_child(path, kinds=["flip", "word"], flips=60, words=60, seed=4)
    assert result["counts"]["model_error"] > 20


_INDEX_VECTORS = {1: (tflite.Int32Vector, 4), 2: (tflite.Uint16Vector, 2), 3: (tflite.Uint8Vector, 1)}


def _sparse_vector_value_pos(data: bytes, key: str, which: int) -> tuple[int, int]:
    """(byte position, element size) of element `which` of the first sparse array_segments / array_indices."""
    graph = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0)
    for i in range(graph.TensorsLength()):
        sp = graph.Tensors(i).Sparsity()
        if sp is None:
            continue
        for level in range(sp.DimMetadataLength()):
            meta = sp.DimMetadata(level)
            table = meta.ArrayIndices() if key == "indices" else meta.ArraySegments()
            kind = meta.ArrayIndicesType() if key == "indices" else meta.ArraySegmentsType()
            if table is not None:
                cls, size = _INDEX_VECTORS[kind]
                vec = cls()
                vec.Init(table.Bytes, table.Pos)
                return vec._tab.Vector(4) + size * which, size
    raise AssertionError("no sparse tensor")


@pytest.mark.models
@pytest.mark.parametrize(("key", "which", "value", "message"), [
    ("indices", 0, 200, "array_indices of level 3 out of range"),
    ("indices", 5, 32, "array_indices of level 3 out of range"),
    ("segments", 1, 255, "array_segments of level 3"),
    ("segments", 0, 3, "array_segments of level 3"),
])
def test_sparse_indices_out_of_range(key: str, which: int, value: int, message: str) -> None:
    data = model_bytes(SPARSE)
    read_model(data)  # the unpatched model is fine
    pos, size = _sparse_vector_value_pos(data, key, which)
    patched = bytearray(data)
    patched[pos:pos + size] = value.to_bytes(size, "little")
    with pytest.raises(ModelError, match=message):
        read_model(bytes(patched))


def test_random_bytes(small_path: Path) -> None:
    result = run_child(small_path, kinds=["random"], random=300, seed=3)
    assert result["counts"]["ok"] == 0


# -- targeted corruptions --------------------------------------------------------------------------------
def _graph(model: Model) -> Graph:
    return model.subgraphs[0]


def _mutated(edit: Callable[[Model], None]) -> bytes:
    model = small_model()
    edit(model)
    return write_model(model)


def _patch_u32(data: bytes, field_pos: int, value: int) -> bytes:
    b = bytearray(data)
    b[field_pos:field_pos + 4] = value.to_bytes(4, "little")
    return bytes(b)


def _field_pos(table: Any, vtable_offset: int) -> int:
    o = table._tab.Offset(vtable_offset)
    assert o, "field not written (default value), cannot patch it"
    return table._tab.Pos + o


def _tensor_buffer_past_end() -> bytes:
    data = write_model(small_model())
    tensor = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0).Tensors(1)  # 'w', a constant
    assert tensor.Buffer() > 0
    return _patch_u32(data, _field_pos(tensor, 8), 10_000)  # Tensor.buffer is vtable slot 8


def _opcode_past_end() -> bytes:
    data = write_model(small_model())
    op = tflite.Model.GetRootAsModel(data, 0).Subgraphs(0).Operators(1)  # opcode index 1, so it is written
    return _patch_u32(data, _field_pos(op, 4), 7)  # Operator.opcode_index is vtable slot 4


def _metadata_buffer_past_end() -> bytes:
    data = write_model(small_model())
    md = tflite.Model.GetRootAsModel(data, 0).Metadata(0)
    return _patch_u32(data, _field_pos(md, 6), 999)  # Metadata.buffer is vtable slot 6


def _identifier_ok_root_past_end() -> bytes:
    return (1 << 30).to_bytes(4, "little") + b"TFL3" + bytes(64)


def _set_tensor(index: int, **changes: Any) -> Callable[[Model], None]:
    def edit(model: Model) -> None:
        t = _graph(model).tensors[index]
        for k, v in changes.items():
            setattr(t, k, v)
    return edit


def _op_edit(op: int, field: str, value: Any) -> Callable[[Model], None]:
    def edit(model: Model) -> None:
        setattr(_graph(model).ops[op], field, value)
    return edit


def _graph_edit(field: str, value: Any) -> Callable[[Model], None]:
    def edit(model: Model) -> None:
        setattr(_graph(model), field, value)
    return edit


def _signature_edit(**changes: Any) -> Callable[[Model], None]:
    def edit(model: Model) -> None:
        for k, v in changes.items():
            setattr(model.signatures[0], k, v)
    return edit


def _no_subgraphs(model: Model) -> None:
    model.subgraphs.clear()
    model.signatures.clear()


TARGETED: dict[str, tuple[Callable[[], bytes], str]] = {
    "empty": (lambda: b"", r"only 0 bytes"),
    "garbage": (lambda: b"garbage", r"only 7 bytes"),
    "no_identifier": (lambda: bytes(100), r"TFL3"),
    "root_past_end": (_identifier_ok_root_past_end, r"root table offset"),
    "op_input_10000": (lambda: _mutated(_op_edit(0, "inputs", [10_000, 1, 2])),
                       r"tensor index 10000 out of range"),
    "op_input_minus2": (lambda: _mutated(_op_edit(2, "inputs", [-2])), r"tensor index -2 out of range"),
    "op_output_minus1": (lambda: _mutated(_op_edit(2, "outputs", [-1])), r"outputs: tensor index -1"),
    "graph_input": (lambda: _mutated(_graph_edit("inputs", [99])), r"inputs: tensor index 99"),
    "graph_output": (lambda: _mutated(_graph_edit("outputs", [0, 1 << 20])),
                     r"outputs: tensor index 1048576"),
    "tensor_buffer_past_end": (_tensor_buffer_past_end, r"buffer index 10000 out of range"),
    "opcode_past_end": (_opcode_past_end, r"opcode index 7 out of range"),
    "metadata_buffer_past_end": (_metadata_buffer_past_end, r"metadata\[0\]: buffer index 999"),
    "negative_dim": (lambda: _mutated(_set_tensor(0, shape=(1, -8, 8, 3))), r"negative dimension"),
    "huge_shape": (lambda: _mutated(_set_tensor(0, shape=(1 << 20, 1 << 20, 1 << 10))), r"elements"),
    "huge_const": (lambda: _mutated(_set_tensor(1, shape=(1 << 20, 4, 3, 3))), r"holds 432 bytes"),
    "rank_17": (lambda: _mutated(_set_tensor(0, shape=(1,) * 17)), r"rank 17"),
    "buffer_short": (lambda: _mutated(_set_tensor(2, data=np.zeros(3, np.float32))),
                     r"holds 12 bytes.*needs 16"),
    "buffer_long": (lambda: _mutated(_set_tensor(2, data=np.zeros(5, np.float32))),
                    r"holds 20 bytes.*needs 16"),
    "unknown_type": (lambda: _mutated(_set_tensor(0, type_code=99)), r"unknown tensor type 99"),
    "signature_rank": (lambda: _mutated(_set_tensor(0, shape_signature=(-1, 8))), r"shape_signature rank"),
    "signature_dim": (lambda: _mutated(_set_tensor(0, shape_signature=(-5, 8, 8, 3))), r"shape_signature"),
    "quant_axis": (lambda: _mutated(_set_tensor(6, quantization=Quantization(
        np.ones(4, np.float32), np.zeros(4, np.int64), axis=2))), r"quantized_dimension 2 out of range"),
    "quant_scales": (lambda: _mutated(_set_tensor(6, quantization=Quantization(
        np.ones(3, np.float32), np.zeros(3, np.int64), axis=0))), r"3 quantization scales"),
    "quant_zero_points": (lambda: _mutated(_set_tensor(6, quantization=Quantization(
        np.ones(4, np.float32), np.zeros(2, np.int64), axis=0))), r"2 quantization zero points"),
    "unknown_builtin": (lambda: _mutated(_op_edit(2, "builtin_code", 9999)),
                        r"unknown builtin operator code 9999"),
    "custom_without_code": (lambda: _mutated(_op_edit(3, "custom_code", None)),
                            r"CUSTOM op without a custom_code"),
    "signature_subgraph": (lambda: _mutated(_signature_edit(subgraph=3)), r"subgraph index 3 out of range"),
    "signature_tensor": (lambda: _mutated(_signature_edit(outputs={"y": 500})),
                         r"tensor index 500 out of range"),
    "no_subgraphs": (lambda: _mutated(_no_subgraphs), r"no subgraphs"),
}

_READ_ALL = r'''
import json, sys
from gpuengine.errors import ModelError
from gpuengine.model.reader import read_model
out = {}
for path in sys.argv[1:]:
    sys.stderr.write(path + "\n"); sys.stderr.flush()
    try:
        read_model(open(path, "rb").read())
        out[path] = ["ok", ""]
    except BaseException as e:
        out[path] = [type(e).__name__, str(e), isinstance(e, ModelError)]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def targeted_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Reads every targeted corruption once, in a child process; {case: [exception type, message, ...]}."""
    folder = tmp_path_factory.mktemp("targeted")
    paths = {}
    for name, (make, _) in TARGETED.items():
        paths[name] = folder / f"{name}.tflite"
        paths[name].write_bytes(make())
    try:
        proc = subprocess.run([sys.executable, "-c", _READ_ALL, *map(str, paths.values())],
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"reader hung on {err.strip().splitlines()[-1:]}")
    assert proc.returncode == 0, f"reader crashed the child:\n{proc.stderr[-2000:]}"
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: raw[str(path)] for name, path in paths.items()}


@pytest.mark.parametrize("case", sorted(TARGETED))
def test_targeted_corruption_raises_model_error(case: str, targeted_results: dict[str, list[Any]]) -> None:
    kind, message, *rest = targeted_results[case]
    assert kind != "ok", f"{case}: the corrupt model was accepted"
    assert rest == [True], f"{case}: {kind} escaped instead of ModelError: {message}"
    assert re.search(TARGETED[case][1], message), f"{case}: unhelpful message {message!r}"


def test_targeted_cases_differ_from_valid_model() -> None:
    # Each byte-patch helper really changed the file (guards against a patch that silently did nothing).
    valid = write_model(small_model())
    for make in (_tensor_buffer_past_end, _opcode_past_end, _metadata_buffer_past_end):
        patched = make()
        assert len(patched) == len(valid) and patched != valid


def test_large_but_plausible_shapes_parse() -> None:
    # Non-constant tensors may declare big shapes; only impossible ones are rejected.
    model = read_model(_mutated(_set_tensor(0, shape=(1, 4096, 4096, 3))))
    assert model.main.tensors[0].shape == (1, 4096, 4096, 3)


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="cannot read model file"):
        read_model(tmp_path / "missing.tflite")
    with pytest.raises(ModelError, match="cannot read model file"):
        read_model(tmp_path)


def test_read_accepts_bytes_like_and_paths(small_path: Path) -> None:
    data = small_path.read_bytes()
    for source in (data, bytearray(data), memoryview(data), small_path, str(small_path)):
        codes = [op.code for op in read_model(source).main.ops]
        assert codes == ["CONV_2D", "RESHAPE", "SOFTMAX", "MyCustomOp"]


@pytest.mark.parametrize(("content", "message"), [
    (b"garbage", r"only 7 bytes"),
    (b"garbage and more garbage", r"TFL3"),
    (bytes(4) + b"TFL3" + bytes(8), r"malformed|no subgraphs|out of range|past the end"),
])
def test_interpreter_rejects_garbage(content: bytes, message: str) -> None:
    with pytest.raises(ModelError, match=message) as info:
        Interpreter(model_content=content)
    assert isinstance(info.value, ValueError)  # LiteRT raises ValueError for a bad model; so do we


def test_interpreter_rejects_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="missing.tflite"):
        Interpreter(model_path=str(tmp_path / "missing.tflite"))
