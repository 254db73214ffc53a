"""`gpuengine fuzz`: mutate models, run every mutant through load -> allocate_tensors -> invoke in a worker
subprocess with a wall-time and a memory limit, and count the outcomes.

A malformed model must end as a `gpuengine.ModelError`, a well-formed one as a clean run; anything else (another
exception, a crash, a hang, running out of memory) is a bug, and its mutant is kept in the out folder (the
.tflite and a JSON with the outcome, the seed and the mutation) for a regression test. Two more things are
counted and listed in the report's `review`: ModelErrors raised after construction (LiteRT's prepare refused an op
in the CPU fallback that no validator rule caught: a rule to add to model/validate.py) and UnsupportedOpErrors
(`unsupported`: a well-formed op that neither the GPU nor LiteRT can run, e.g. a STABLEHLO_* op LiteRT 2.3 does
not register).

Mutators, all seeded by (seed, case number) so a campaign is reproducible case by case:
* `flip`: a few random bytes anywhere; `head_flip`: the same inside the first 2 KiB (where the root table, its
  vtable and the first offsets usually are); `truncate`: the file cut short.
* `field`: one scalar of the flatbuffer rewritten in place (the schema bindings find where it lives): a tensor's
  shape or shape signature, type or buffer index; an op's opcode index, input/output/intermediate tensor
  indices or an option value; an operator code; a subgraph's inputs/outputs; a subgraph reference (signature
  subgraph index, *_subgraph_index options); a buffer's offset/size; a quantized dimension.
* `ir`: the model read into the IR, changed where a field may be absent from the file (option values, an op's
  code, its input list, a tensor's shape or type, the graph's inputs/outputs), and written back
  (gpuengine.model.builder.write_model).

Cases run in a worker process (started with RLIMIT_AS set, imports and the GPU device paid once); the parent
kills it when a case overruns its time limit (a hang), restarts it after a crash, and after every case that was
neither clean, a ModelError nor unsupported, so one case's damage never reaches the next one's outcome.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

OUTCOMES = ("clean", "model_error", "unsupported", "exception", "crash", "hang", "oom")
GOOD = ("clean", "model_error")
# "unsupported": an UnsupportedOpError, a deliberate refusal of a well-formed model nothing here can run (a custom op
# LiteRT has no kernel for, an op calling other subgraphs on the CPU fallback). Not kept as a finding, but listed:
# a malformed op the validator lets through can end there too.
MUTATORS = {"flip": 0.2, "head_flip": 0.2, "truncate": 0.1, "field": 0.3, "ir": 0.2}
HEAD_BYTES = 2048
RESULT = "@@fuzz-result@@"
READY = "@@fuzz-ready@@"
WORKER_COMMAND = [sys.executable, "-m", "gpuengine.tools.fuzz", "--worker"]  # tests swap in fakes
_OOM_SIGNS = ("memory allocation of", "MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")


# -- finding the fields of a flatbuffer ------------------------------------------------------------------------
_FLAG_TYPES = {"Bool": np.uint8, "Int8": np.int8, "Uint8": np.uint8, "Int16": np.int16, "Uint16": np.uint16,
               "Int32": np.int32, "Uint32": np.uint32, "Int64": np.int64, "Uint64": np.uint64,
               "Float32": np.float32, "Float64": np.float64}


@functools.cache
def _layout(kind: str) -> dict[str, tuple[int, Any, bool]]:
    """{accessor: (vtable slot, numpy type, is a vector)} of a schema table's scalar and scalar-vector fields,
    read from the generated accessors' source (the bindings have no reflection API)."""
    import tflite

    cls = getattr(tflite, kind)
    out: dict[str, tuple[int, Any, bool]] = {}
    for name, fn in vars(cls).items():
        if not callable(fn) or not name[0].isupper() or name == "Init" or name.startswith("GetRoot") \
                or name.endswith(("Length", "AsNumpy", "IsNone", "HasIdentifier")):
            continue
        src = inspect.getsource(fn)
        slot = re.search(r"Offset\((\d+)\)", src)
        flags = [f for f in re.findall(r"number_types\.(\w+)Flags", src) if f != "UOffsetT"]
        if slot and flags and flags[0] in _FLAG_TYPES:
            out[name] = (int(slot.group(1)), _FLAG_TYPES[flags[0]], "Vector(o)" in src)
    return out


@dataclass
class Site:
    """One scalar of the file: where it is, its type, and what it means."""

    category: str
    path: str
    pos: int
    dtype: Any
    bound: int = 0  # the size of the range it indexes into (0: not an index)


def _sites_of(obj: Any, kind: str, path: str, fields: dict[str, tuple[str, int]], data: bytes) -> list[Site]:
    """Sites of the named fields of one table: {accessor: (category, bound)}."""
    sites: list[Site] = []
    layout = _layout(kind)
    tab = obj._tab  # noqa: SLF001 - positions are what an in-place mutation needs
    for accessor, (category, bound) in fields.items():
        if accessor not in layout:
            continue
        slot, dtype, is_vector = layout[accessor]
        o = tab.Offset(slot)
        if not o:
            continue  # absent (the default): only the `ir` mutator can set it
        if not is_vector:
            sites.append(Site(category, f"{path}.{accessor}", tab.Pos + o, dtype, bound))
            continue
        start, n = tab.Vector(o), tab.VectorLen(o)
        size = np.dtype(dtype).itemsize
        n = min(n, 64, max(0, (len(data) - start) // size))
        sites += [Site(category, f"{path}.{accessor}[{j}]", start + j * size, dtype, bound) for j in range(n)]
    return sites


def _option_sites(table: Any, kind: str, path: str, data: bytes, n_subgraphs: int) -> list[Site]:
    import tflite

    cls = getattr(tflite, kind, None)
    if cls is None:
        return []
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    fields = {a: ("subgraph_ref" if "Subgraph" in a else "option", n_subgraphs if "Subgraph" in a else 0)
              for a in _layout(kind)}
    return _sites_of(obj, kind, path, fields, data)


def field_sites(data: bytes) -> list[Site]:
    """Every scalar the `field` mutator may rewrite, found by walking the model with the schema bindings."""
    import tflite

    from gpuengine.model.reader import OPTION2_NAMES, OPTION_NAMES

    m = tflite.Model.GetRootAsModel(data, 0)
    n_buffers, n_codes, n_sub = m.BuffersLength(), m.OperatorCodesLength(), m.SubgraphsLength()
    sites: list[Site] = []
    for i in range(min(n_codes, 256)):
        sites += _sites_of(m.OperatorCodes(i), "OperatorCode", f"operator_codes[{i}]",
                           {"BuiltinCode": ("op_code", 0), "DeprecatedBuiltinCode": ("op_code", 0)}, data)
    for i in range(min(n_buffers, 512)):
        sites += _sites_of(m.Buffers(i), "Buffer", f"buffers[{i}]",
                           {"Offset": ("buffer", len(data)), "Size": ("buffer", len(data))}, data)
    for g in range(min(n_sub, 16)):
        sg = m.Subgraphs(g)
        n_t = sg.TensorsLength()
        where = f"subgraphs[{g}]"
        sites += _sites_of(sg, "SubGraph", where, {"Inputs": ("graph_io", n_t), "Outputs": ("graph_io", n_t)}, data)
        for t in range(min(n_t, 2048)):
            tensor = sg.Tensors(t)
            sites += _sites_of(tensor, "Tensor", f"{where}.tensors[{t}]",
                               {"Shape": ("shape", 0), "ShapeSignature": ("shape", 0), "Type": ("tensor_type", 18),
                                "Buffer": ("buffer_index", n_buffers)}, data)
            q = tensor.Quantization()
            if q is not None:
                sites += _sites_of(q, "QuantizationParameters", f"{where}.tensors[{t}].quantization",
                                   {"QuantizedDimension": ("quantization", 4)}, data)
        for o in range(min(sg.OperatorsLength(), 2048)):
            op = sg.Operators(o)
            path = f"{where}.operators[{o}]"
            sites += _sites_of(op, "Operator", path,
                               {"OpcodeIndex": ("op_code", n_codes), "Inputs": ("op_tensors", n_t),
                                "Outputs": ("op_tensors", n_t), "Intermediates": ("op_tensors", n_t),
                                "BuiltinOptionsType": ("option", 0)}, data)
            kind = OPTION_NAMES.get(op.BuiltinOptionsType()) if op.BuiltinOptionsType() else None
            if kind is None and op.BuiltinOptions2Type():
                kind = OPTION2_NAMES.get(op.BuiltinOptions2Type())
                table = op.BuiltinOptions2()
            else:
                table = op.BuiltinOptions()
            if kind is not None and table is not None:
                sites += _option_sites(table, kind, f"{path}.options", data, n_sub)
    for s in range(min(m.SignatureDefsLength(), 16)):
        sig = m.SignatureDefs(s)
        sites += _sites_of(sig, "SignatureDef", f"signature_defs[{s}]", {"SubgraphIndex": ("subgraph_ref", n_sub)},
                           data)
        for j in range(min(sig.InputsLength(), 64)):
            sites += _sites_of(sig.Inputs(j), "TensorMap", f"signature_defs[{s}].inputs[{j}]",
                               {"TensorIndex": ("graph_io", 0)}, data)
    return [s for s in sites if 0 <= s.pos and s.pos + np.dtype(s.dtype).itemsize <= len(data)]


def _new_value(rng: np.random.Generator, old: Any, dtype: Any, bound: int) -> Any:
    """A value that breaks assumptions: boundaries, off-by-ones, extremes, the range an index points into."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.choice([0.0, -1.0, np.nan, np.inf, -np.inf, 1e38, -float(old), float(old) * 1000.0, 0.5])
    old = int(old)
    info = np.iinfo(dt)
    choices = [0, 1, -1, 2, 3, old + 1, old - 1, old * 2, old + int(rng.integers(2, 17)), -old, 255, 65535,
               int(info.max), int(info.min), int(rng.integers(-8, 64))]
    if bound:
        choices += [bound, bound - 1, bound + 1, int(rng.integers(0, bound + 1))]
    return choices[int(rng.integers(len(choices)))]


def _write_scalar(data: bytearray, site: Site, value: Any) -> Any:
    dt = np.dtype(site.dtype)
    if dt.kind == "f":
        arr = np.array([value], np.float64).astype(dt)
    else:
        arr = np.array([int(value) & 0xFFFFFFFFFFFFFFFF], np.uint64).astype(dt.newbyteorder("<"), casting="unsafe")
    data[site.pos:site.pos + dt.itemsize] = arr.astype(dt.newbyteorder("<")).tobytes()
    return arr[0].item()


# -- mutators ----------------------------------------------------------------------------------------------------
def _flip(data: bytes, rng: np.random.Generator, limit: int) -> tuple[bytes, dict]:
    out = bytearray(data)
    n = int(rng.integers(1, 9))
    positions = sorted(int(p) for p in rng.integers(0, max(1, min(limit, len(out))), n))
    for p in positions:
        out[p] ^= int(rng.integers(1, 256))
    return bytes(out), {"positions": positions}


def _truncate(data: bytes, rng: np.random.Generator) -> tuple[bytes, dict]:
    keep = int(rng.integers(0, len(data)))
    return data[:keep], {"length": keep}


def _field(data: bytes, rng: np.random.Generator) -> tuple[bytes, dict]:
    sites = field_sites(data)
    if not sites:
        return _flip(data, rng, len(data))
    categories = sorted({s.category for s in sites})
    category = categories[int(rng.integers(len(categories)))]
    pool = [s for s in sites if s.category == category]
    site = pool[int(rng.integers(len(pool)))]
    dt = np.dtype(site.dtype).newbyteorder("<")
    old = np.frombuffer(data, dt, 1, site.pos)[0].item()
    out = bytearray(data)
    for _ in range(8):
        new = _write_scalar(out, site, _new_value(rng, old, site.dtype, site.bound))
        if not (new == old or (isinstance(new, float) and np.isnan(new) and np.isnan(old))):
            break
    return bytes(out), {"category": category, "field": site.path, "old": old, "new": new}


_IR_OPS = ["ADD", "MUL", "SUB", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "RESHAPE", "SOFTMAX", "PAD",
           "CONCATENATION", "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "TRANSPOSE", "STRIDED_SLICE", "SLICE",
           "GATHER", "RELU", "LOGISTIC", "RESIZE_BILINEAR", "SPLIT", "PACK", "TILE", "BATCH_MATMUL",
           "TRANSPOSE_CONV", "SQUEEZE", "DEPTH_TO_SPACE", "SPACE_TO_BATCH_ND", "SELECT_V2", "PRELU", "MIRROR_PAD"]


def _ir(data: bytes, rng: np.random.Generator) -> tuple[bytes, dict]:
    """Change the IR where the file may not hold the field at all, then write the model back."""
    import dataclasses

    from tflite.BuiltinOperator import BuiltinOperator

    from gpuengine.errors import ModelError
    from gpuengine.model.builder import _OPTION_CODES, make_options, option_fields, write_model
    from gpuengine.model.reader import read_model

    try:
        model = read_model(data)
    except ModelError:
        return _flip(data, rng, len(data))
    if any(op.options is not None and op.options.kind not in _OPTION_CODES for g in model.subgraphs for op in g.ops):
        return _field(data, rng)  # the writer would drop options it cannot express (StableHLO composites ...)
    g = model.subgraphs[int(rng.integers(len(model.subgraphs)))]
    if not g.ops:
        return _flip(data, rng, len(data))
    kinds = ["option", "op_code", "inputs", "shape", "dtype", "graph_io"]
    kind = kinds[int(rng.integers(len(kinds)))]
    k = int(rng.integers(len(g.ops)))
    op = g.ops[k]
    detail: dict[str, Any] = {"kind": kind, "op": k, "code": op.code}
    n_t = len(g.tensors)
    if kind == "option":
        if op.options is None and not op.is_custom:
            try:
                op.options = make_options(op.code, {})
            except ValueError:
                op.options = None
        fields = option_fields(op.options.kind) if op.options is not None else ()
        if not fields:
            return _flip(data, rng, len(data))
        _, name, is_vector = fields[int(rng.integers(len(fields)))]
        old = op.options.fields.get(name)
        if is_vector:
            values = list(old or [1])
            values[int(rng.integers(len(values)))] = int(rng.choice([-2, -1, 0, 1, 3, 7, 1 << 20]))
            new: Any = values
        elif isinstance(old, float):
            new = float(rng.choice([np.nan, np.inf, -1.0, 0.0, 1e30, 2.5]))
        elif isinstance(old, bool):
            new = not old
        else:
            new = int(rng.choice([-1, 0, 1, 2, 3, 5, 7, 100, -100, 1 << 30]))
        op.options.fields[name] = new
        detail.update(field=name, old=old, new=new)
    elif kind == "op_code":
        code = _IR_OPS[int(rng.integers(len(_IR_OPS)))]
        g.ops[k] = dataclasses.replace(op, code=code, builtin_code=int(getattr(BuiltinOperator, code)),
                                       custom_code=None)
        detail["new"] = code
    elif kind == "inputs":
        how = ["drop", "extra", "swap", "omit", "self"][int(rng.integers(5))]
        ins = list(op.inputs)
        if how == "drop" and ins:
            ins.pop(int(rng.integers(len(ins))))
        elif how == "extra":
            ins.append(int(rng.integers(n_t)))
        elif how == "swap" and len(ins) > 1:
            a, b = (int(x) for x in rng.choice(len(ins), 2, replace=False))
            ins[a], ins[b] = ins[b], ins[a]
        elif how == "omit" and ins:
            ins[int(rng.integers(len(ins)))] = -1
        elif how == "self" and ins and op.outputs:
            ins[int(rng.integers(len(ins)))] = op.outputs[0]
        op.inputs = ins
        detail.update(how=how, inputs=ins)
    elif kind in ("shape", "dtype"):
        candidates = [t for t in [*op.inputs, *op.outputs] if t >= 0]
        if not candidates:
            return _flip(data, rng, len(data))
        t = candidates[int(rng.integers(len(candidates)))]
        tensor = g.tensors[t]
        if kind == "shape":
            shape = list(tensor.shape)
            how = ["dim", "drop", "add", "huge"][int(rng.integers(4))]
            if how == "dim" and shape:
                shape[int(rng.integers(len(shape)))] = int(rng.choice([0, 1, 2, 3, 5, 17, 1000]))
            elif how == "drop" and shape:
                shape.pop(int(rng.integers(len(shape))))
            elif how == "add":
                shape.insert(int(rng.integers(len(shape) + 1)), int(rng.choice([1, 2, 3])))
            else:
                shape = [int(rng.choice([1 << 16, 1 << 20, 1 << 30])) if i == 0 else d for i, d in enumerate(shape)]
            new_shape = tuple(shape)
            if tensor.data is not None:  # constants keep their data size: reshape only when it still fits
                size = int(np.prod(new_shape)) if new_shape else 1
                if size != tensor.data.size:
                    return _flip(data, rng, len(data))
                g.tensors[t] = dataclasses.replace(tensor, shape=new_shape, data=tensor.data.reshape(new_shape),
                                                   shape_signature=None)
            else:
                g.tensors[t] = dataclasses.replace(tensor, shape=new_shape, shape_signature=None)
            detail.update(tensor=t, old=list(tensor.shape), new=list(new_shape))
        else:
            if tensor.data is not None:
                return _flip(data, rng, len(data))
            dtype = [np.int32, np.float16, np.int8, np.bool_, np.int64, np.uint8][int(rng.integers(6))]
            g.tensors[t] = dataclasses.replace(tensor, dtype=np.dtype(dtype), type_code=0, quantization=None)
            detail.update(tensor=t, new=np.dtype(dtype).name)
    else:  # graph_io
        how = ["output", "input", "drop_output", "const_input"][int(rng.integers(4))]
        if how == "output":
            g.outputs = [*g.outputs, int(rng.integers(n_t))]
        elif how == "input":
            g.inputs = [*g.inputs, int(rng.integers(n_t))]
        elif how == "drop_output" and g.outputs:
            g.outputs = g.outputs[:-1]
        else:
            consts = [t.index for t in g.tensors if t.data is not None]
            if consts:
                g.inputs = [*g.inputs, consts[int(rng.integers(len(consts)))]]
        detail.update(how=how, inputs=g.inputs, outputs=g.outputs)
    try:
        return write_model(model), detail
    except Exception:  # noqa: BLE001 - the writer cannot express this model (sparse weights...): mutate the bytes
        return _flip(data, rng, len(data))


def mutate(data: bytes, seed: int, case: int) -> tuple[bytes, dict]:
    """Mutant number `case` of `data` for `seed` (the same bytes every time)."""
    rng = np.random.default_rng([seed, case])
    names = list(MUTATORS)
    name = names[int(rng.choice(len(names), p=np.array(list(MUTATORS.values())) / sum(MUTATORS.values())))]
    if name == "flip":
        out, detail = _flip(data, rng, len(data))
    elif name == "head_flip":
        out, detail = _flip(data, rng, HEAD_BYTES)
    elif name == "truncate":
        out, detail = _truncate(data, rng)
    elif name == "field":
        out, detail = _field(data, rng)
    else:
        out, detail = _ir(data, rng)
    return out, {"mutator": name, **_jsonable(detail)}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


# -- one case, inside the worker ----------------------------------------------------------------------------------
def case_inputs(it: Any, seed: int) -> dict[int, np.ndarray]:
    """Seeded values for every input, whatever its declared type."""
    rng = np.random.default_rng(seed)
    out = {}
    for d in it.get_input_details():
        shape, dtype = tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"])
        if dtype.kind == "f":
            out[d["index"]] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype.kind == "c":
            out[d["index"]] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype.kind == "O":
            out[d["index"]] = np.full(shape, b"a", object)
        else:
            out[d["index"]] = rng.integers(0, 4, shape).astype(dtype)
    return out


def run_case(data: bytes, seed: int) -> dict[str, Any]:
    """load -> allocate_tensors -> invoke on seeded inputs -> read the outputs; the outcome as a dict."""
    from gpuengine import Interpreter
    from gpuengine.errors import ModelError, UnsupportedOpError

    stage = "load"
    try:
        it = Interpreter(model_content=data)
        stage = "allocate"
        it.allocate_tensors()
        stage = "set_tensor"
        for t, v in case_inputs(it, seed).items():
            it.set_tensor(t, v)
        stage = "invoke"
        it.invoke()
        stage = "get_tensor"
        for d in it.get_output_details():
            it.get_tensor(d["index"])
        return {"outcome": "clean"}
    except ModelError as e:
        return {"outcome": "model_error", "stage": stage, "message": str(e)[:400]}
    except UnsupportedOpError as e:
        return {"outcome": "unsupported", "stage": stage, "message": str(e)[:400]}
    except MemoryError as e:
        return {"outcome": "oom", "stage": stage, "type": type(e).__name__, "message": str(e)[:400]}
    except Exception as e:  # noqa: BLE001 - every other exception is a finding
        frames = traceback.extract_tb(e.__traceback__)
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        return {"outcome": "exception", "stage": stage, "type": f"{type(e).__module__}.{type(e).__qualname__}",
                "message": str(e)[:400], "where": where}


def worker_main() -> int:
    """Read `{"path", "seed"}` lines from stdin, answer each with a result line; warm up (imports, device) first."""
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from gpuengine import Interpreter  # noqa: F401 - imported once, before the first case's clock starts

    try:
        from gpuengine.runtime.device import get_device

        get_device()
    except Exception:  # noqa: BLE001 - no adapter: every case then runs on the CPU fallback or fails alike
        pass
    print(READY, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        result = run_case(Path(request["path"]).read_bytes(), int(request["seed"]))
        print(RESULT + json.dumps(result), flush=True)
    return 0


# -- the parent: workers, limits, outcomes --------------------------------------------------------------------------
class Worker:
    """A worker subprocess with RLIMIT_AS set before it starts; its stderr goes to a file (crash messages)."""

    def __init__(self, folder: Path, number: int, memory_mb: int, command: list[str]) -> None:
        self.stderr_path = folder / f"worker{number}.stderr"
        self.stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - lives as long as the worker
        limit = memory_mb << 20

        def limits() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        env.setdefault("XDG_RUNTIME_DIR", "/tmp")
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     preexec_fn=limits, env=env)
        self.buffer = b""
        self.eof = False  # stdout closed: the worker is gone (or going), whatever poll() says yet
        self.stderr_offset = 0

    def read_line(self, deadline: float) -> str | None:
        """The next stdout line, or None at EOF (self.eof set) or when the deadline passes."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or self.eof:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.eof = True
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace")

    def wait_for(self, marker: str, deadline: float) -> str | None:
        while True:
            line = self.read_line(deadline)
            if line is None or line.startswith(marker):
                return None if line is None else line[len(marker):]

    def stderr_tail(self) -> str:
        self.stderr.flush()
        text = self.stderr_path.read_bytes()[self.stderr_offset:].decode("utf-8", "replace")
        lines = [ln for ln in text.strip().splitlines() if ln.strip() and "XNNPACK" not in ln]
        return " | ".join(lines[-4:])[-600:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


class Runner:
    """Runs cases one at a time in a worker; restarts it after a case that was not clean or a ModelError."""

    def __init__(self, folder: Path, timeout_s: float, memory_mb: int, startup_s: float = 180.0,
                 command: list[str] | None = None) -> None:
        self.folder, self.timeout_s, self.memory_mb, self.startup_s = folder, timeout_s, memory_mb, startup_s
        self.command = command or WORKER_COMMAND
        self.worker: Worker | None = None
        self.started = 0

    def _worker(self) -> Worker:
        if self.worker is None:
            self.started += 1
            self.worker = Worker(self.folder, self.started, self.memory_mb, self.command)
            if self.worker.wait_for(READY, time.monotonic() + self.startup_s) is None:
                tail = self.worker.stderr_tail()
                self.worker.stop()
                self.worker = None
                raise RuntimeError(f"the fuzz worker did not start: {tail}")
        return self.worker

    def run(self, data: bytes, seed: int) -> dict[str, Any]:
        worker = self._worker()
        path = self.folder / "case.tflite"
        path.write_bytes(data)
        worker.stderr_offset = worker.stderr_path.stat().st_size
        assert worker.proc.stdin is not None
        start = time.monotonic()
        try:
            worker.proc.stdin.write((json.dumps({"path": str(path), "seed": seed}) + "\n").encode())
            worker.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = worker.wait_for(RESULT, start + self.timeout_s)
        seconds = time.monotonic() - start
        if line is not None:
            result = json.loads(line)
        elif not worker.eof:  # still running past the limit
            result = {"outcome": "hang", "message": f"no result after {self.timeout_s:.0f} s"}
        else:
            try:
                code = worker.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # closed its stdout but lives on: as good as hung
                code = 0
            code = worker.proc.returncode if worker.proc.returncode is not None else code
            tail = worker.stderr_tail()
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            result = {"outcome": "oom" if any(s in tail for s in _OOM_SIGNS) else "crash",
                      "message": f"worker died ({how}): {tail}"}
        if result["outcome"] not in (*GOOD, "unsupported"):
            if result["outcome"] != "exception":
                result.setdefault("stderr", worker.stderr_tail())
            worker.stop()
            self.worker = None
        result["seconds"] = round(seconds, 3)
        return result

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


@dataclass
class Campaign:
    """Counts by outcome (and by mutator) and the cases kept."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    by_mutator: dict[str, dict[str, int]] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    model_error_stages: dict[str, int] = field(default_factory=dict)  # load = the validator, at construction
    # ModelErrors after construction (LiteRT's prepare refused what no rule caught) and UnsupportedOpErrors: each
    # may be a rule model/validate.py lacks
    review: list[dict[str, Any]] = field(default_factory=list)
    cases: int = 0
    seconds: float = 0.0
    stopped_by_budget: bool = False

    def add(self, mutator: str, result: dict[str, Any]) -> None:
        self.cases += 1
        self.counts[result["outcome"]] += 1
        per = self.by_mutator.setdefault(mutator, dict.fromkeys(OUTCOMES, 0))
        per[result["outcome"]] += 1
        if result["outcome"] == "model_error":
            stage = result.get("stage", "?")
            self.model_error_stages[stage] = self.model_error_stages.get(stage, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {"cases": self.cases, "counts": self.counts, "by_mutator": self.by_mutator,
                "model_error_stages": self.model_error_stages, "review": self.review,
                "seconds": round(self.seconds, 1),
                "seconds_per_case": round(self.seconds / self.cases, 3) if self.cases else None,
                "stopped_by_budget": self.stopped_by_budget, "findings": self.findings}


def fuzz(models: list[tuple[str, bytes]], count: int, seed: int, time_budget_s: float | None = None,
         out: Path | None = None, timeout_s: float = 60.0, memory_mb: int = 6144,
         progress: Any = None, command: list[str] | None = None) -> Campaign:
    """Mutant k (k < count) of models[k % len(models)], run in a worker; non-ModelError failures kept in `out`."""
    campaign = Campaign()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuengine-fuzz-") as tmp:
        runner = Runner(Path(tmp), timeout_s, memory_mb, command=command)
        try:
            for k in range(count):
                if time_budget_s is not None and time.monotonic() - start > time_budget_s:
                    campaign.stopped_by_budget = True
                    break
                name, data = models[k % len(models)]
                mutant, mutation = mutate(data, seed, k)
                result = runner.run(mutant, seed)
                campaign.add(mutation["mutator"], result)
                if (result["outcome"] == "model_error" and result.get("stage") != "load") \
                        or result["outcome"] == "unsupported":
                    campaign.review.append({"model": name, "case": k, "mutation": mutation, **result})
                if result["outcome"] not in (*GOOD, "unsupported"):
                    finding = {"model": name, "seed": seed, "case": k, "mutation": mutation, **result}
                    campaign.findings.append(finding)
                    if out is not None:
                        keep(out, f"{_slug(name)}-s{seed}-c{k}", mutant, finding)
                if progress is not None:
                    progress(k, name, mutation, result)
        finally:
            runner.close()
    campaign.seconds = time.monotonic() - start
    return campaign


def replay(paths: list[Path], timeout_s: float = 60.0, memory_mb: int = 6144,
           command: list[str] | None = None) -> list[dict[str, Any]]:
    """Run saved mutants unchanged (each with the seed in its JSON beside it, else 0): one result per path."""
    results = []
    with tempfile.TemporaryDirectory(prefix="gpuengine-fuzz-") as tmp:
        runner = Runner(Path(tmp), timeout_s, memory_mb, command=command)
        try:
            for path in paths:
                meta = path.with_suffix(".json")
                seed = json.loads(meta.read_text()).get("seed", 0) if meta.exists() else 0
                results.append({"path": str(path), **runner.run(path.read_bytes(), int(seed))})
        finally:
            runner.close()
    return results


def keep(out: Path, stem: str, mutant: bytes, finding: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.tflite").write_bytes(mutant)
    (out / f"{stem}.json").write_text(json.dumps(finding, indent=1) + "\n")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name.split(" ")[0].removesuffix(".tflite")).strip("_") or "model"


# -- the command ---------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    from .common import load_model

    out = Path(args.out) if args.out else None
    if args.replay:
        results = replay([Path(m) for m in args.models], args.timeout, args.memory_mb)
        bad = [r for r in results if r["outcome"] not in GOOD]
        if args.json:
            print(json.dumps({"results": results}))
        else:
            for r in results:
                print(f"{r['outcome']:<12} {r['path']}  {r.get('type', '')} {r.get('message', '')[:160]}")
        return 1 if bad else 0
    models = [load_model(m) for m in args.models]
    from gpuengine.model.reader import read_model

    for _, data in models:  # mutants are made of valid models: a bad one is the user's (ModelError: exit 2)
        read_model(data)

    def progress(k: int, name: str, mutation: dict, result: dict) -> None:
        late = result["outcome"] == "model_error" and result.get("stage") != "load"
        if not args.json and (result["outcome"] not in GOOD or late):
            what = f"model_error at {result['stage']} (no validator rule caught it)" if late else result["outcome"]
            print(f"case {k} ({name}, {mutation['mutator']}): {what}: {result.get('type', '')} "
                  f"{result.get('message', '')[:200]}", flush=True)

    campaign = fuzz(models, args.count, args.seed, args.time_budget, out, args.timeout, args.memory_mb, progress)
    report = campaign.to_json()
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{campaign.cases} mutants of {', '.join(dict.fromkeys(n for n, _ in models))} (seed {args.seed}) in "
              f"{campaign.seconds:.0f} s ({report['seconds_per_case']} s each)"
              + (", stopped by --time-budget" if campaign.stopped_by_budget else ""))
        for outcome in OUTCOMES:
            stages = ", ".join(f"{k} {n}" for k, n in sorted(campaign.model_error_stages.items()))
            print(f"  {outcome:<12} {campaign.counts[outcome]}" + (f" ({stages})" if outcome == "model_error" else ""))
        if campaign.findings and out is not None:
            print(f"{len(campaign.findings)} cases kept in {out}")
    return 1 if campaign.findings else 0


def add_parser(sub: Any) -> None:
    from . import common

    p = sub.add_parser("fuzz", help="mutate models and check every mutant ends as a ModelError or a clean run")
    p.add_argument("models", nargs="+", metavar="MODEL", help="a .tflite path, a zoo name or a reference model name "
                                                              "(with --replay: saved mutants, run unchanged)")
    p.add_argument("--count", type=common.at_least(1), default=100,
                   help="mutants in all, spread over the models in turn")
    p.add_argument("--seed", type=int, default=0, help="seed of the mutations (default 0)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S", help="start no case after S seconds")
    p.add_argument("--out", metavar="DIR", default="fuzz-findings",
                   help="keep every case that is neither clean nor a ModelError here (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="wall-time limit of one case (a hang)")
    p.add_argument("--memory-mb", type=int, default=6144, help="address-space limit of the worker (RLIMIT_AS)")
    p.add_argument("--replay", action="store_true", help="run the MODEL files as they are (a saved corpus)")
    p.add_argument("--json", action="store_true", help="print the campaign's summary as JSON")
    p.set_defaults(func=run)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit("usage: gpuengine fuzz MODEL... (this module's own entry point is for its worker processes)")
