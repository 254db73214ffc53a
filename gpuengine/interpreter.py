"""A drop-in for ai_edge_litert.interpreter.Interpreter that runs the model on the GPU through WebGPU.

Swap `from ai_edge_litert.interpreter import Interpreter` for `from gpuengine import Interpreter`; engine
extras are keyword options (adapter, target, precision, memory_strategy, workgroup_cache, optimize).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from .codegen import PRECISIONS
from .engine import CompiledGraph
from .errors import ModelError, UnsupportedOpError
from .memory import STRATEGIES
from .model.ir import Graph, Model, Tensor
from .model.reader import read_model
from .runtime.program import EngineOptions
from .tuning.target import check as check_target

_TYPE_NAMES = {0: "FLOAT32", 1: "FLOAT16", 2: "INT32", 3: "UINT8", 4: "INT64", 5: "STRING", 6: "BOOL",
               7: "INT16", 9: "INT8", 10: "FLOAT64"}


def tensor_details(t: Tensor) -> dict[str, Any]:
    """The same keys and value types LiteRT's get_tensor_details() gives."""
    q = t.quantization
    scales = q.scale.astype(np.float32) if q is not None else np.zeros(0, np.float32)
    zeros = q.zero_point.astype(np.int32) if q is not None else np.zeros(0, np.int32)
    sparsity: dict[str, Any] = {}
    if t.sparsity is not None:  # the shape LiteRT gives: no empty block_map, dense/sparse dims differ
        sparsity = {"traversal_order": np.array(t.sparsity.traversal_order, np.int32)}
        if t.sparsity.block_map:
            sparsity["block_map"] = np.array(t.sparsity.block_map, np.int32)
        dims = []
        for d in t.sparsity.dim_metadata:
            if d["format"] == 0:
                dims.append({"format": 0, "dense_size": d["dense_size"]})
            else:
                dims.append({"format": d["format"], "array_segments": np.asarray(d["array_segments"], np.int32),
                             "array_indices": np.asarray(d["array_indices"], np.int32)})
        sparsity["dim_metadata"] = dims
    return {
        "name": t.name,
        "index": t.index,
        "shape": np.array(t.shape, np.int32),
        "shape_signature": np.array(t.shape_signature if t.shape_signature is not None else t.shape, np.int32),
        "dtype": t.dtype.type,
        "quantization": (float(scales[0]), int(zeros[0])) if scales.size == 1 and zeros.size else (0.0, 0),
        "quantization_parameters": {"scales": scales, "zero_points": zeros,
                                    "quantized_dimension": q.axis if q is not None else 0, "block_size": 0},
        "sparsity_parameters": sparsity,
    }


class Interpreter:
    """LiteRT-compatible interpreter backed by WebGPU kernels (CPU fallback through LiteRT for the rest)."""

    def __init__(self, model_path: str | os.PathLike | None = None, model_content: bytes | None = None,
                 experimental_delegates: Any = None, num_threads: int | None = None,
                 experimental_op_resolver_type: Any = None, experimental_preserve_all_tensors: bool = False,
                 experimental_disable_delegate_clustering: bool = False,
                 experimental_default_delegate_latest_features: bool = False,
                 experimental_compress_quantization_zero_points: bool = False,
                 experimental_disable_delegate_node_fusion: bool = False,
                 experimental_force_delegate_node_profiling: bool = False,
                 *, adapter: str | None = None, precision: str | None = None, memory_strategy: str = "best",
                 workgroup_cache: str | None = None, optimize: bool | None = None, target: str | None = None,
                 ) -> None:
        """LiteRT's arguments are accepted for drop-in use (the experimental ones change nothing here: the
        GPU partitioning replaces LiteRT's delegates); engine options are keyword-only."""
        if (model_path is None) == (model_content is None):
            raise ValueError("Exactly one of model_path or model_content must be given")
        precision = (precision or os.environ.get("GPUENGINE_PRECISION") or "fp32").strip().lower()
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)} "
                             "(argument or env GPUENGINE_PRECISION)")
        if memory_strategy not in STRATEGIES:
            raise ValueError(f"memory_strategy {memory_strategy!r} is not one of {', '.join(STRATEGIES)}")
        target = check_target(target)  # ValueError for an unknown class, before any work
        self._model: Model = read_model(model_path if model_path is not None else model_content)
        if optimize is None:  # GPUENGINE_OPTIMIZE=0 turns passes and fusion off everywhere (the test suite's switch)
            optimize = os.environ.get("GPUENGINE_OPTIMIZE", "1").strip().lower() not in ("0", "false", "no", "off")
        self._options = EngineOptions(adapter=adapter, precision=precision, memory_strategy=memory_strategy,
                                      workgroup_cache=workgroup_cache, optimize=optimize, target=target)
        self._num_threads = num_threads
        self._graph: Graph = self._model.main
        self._compiled: CompiledGraph | None = None
        self._values: dict[int, np.ndarray] = {}
        self._outputs: dict[int, np.ndarray] = {}
        self._runners: dict[str, SignatureRunner] = {}
        self._invoke_lock = threading.Lock()

    # -- setup -------------------------------------------------------------------------------------------
    def allocate_tensors(self) -> None:
        """Compile the model (once), or again on a new device when the GPU it ran on was lost."""
        if self._compiled is not None and self._compiled.gpu is not None and not self._compiled.gpu.alive():
            self._compiled = None
        if self._compiled is None:
            self._compiled = CompiledGraph(self._graph, self._options, self._num_threads)
        for t in self._graph.inputs:
            tensor = self._graph.tensors[t]
            if t not in self._values or self._values[t].shape != tensor.shape:
                self._values[t] = np.zeros(tensor.shape, tensor.dtype)

    def _require_allocated(self) -> CompiledGraph:
        if self._compiled is None:
            raise RuntimeError("Invoke called on model that is not ready. Call allocate_tensors() first.")
        return self._compiled

    def resize_tensor_input(self, input_index: int, tensor_size: Any, strict: bool = False) -> None:
        """Change an input's shape; the graph's other shapes are re-derived and the model rebuilt."""
        if input_index not in self._graph.inputs:
            raise RuntimeError(f"Tensor {input_index} is not an input of the model; only inputs can be resized")
        new_shape = tuple(int(d) for d in tensor_size)
        tensor = self._graph.tensors[input_index]
        if new_shape == tensor.shape:
            return
        if strict and tensor.shape_signature is not None:
            if len(new_shape) != len(tensor.shape_signature):
                raise RuntimeError(f"ResizeInputTensorStrict: rank {len(new_shape)} differs from the input's "
                                   f"rank {len(tensor.shape_signature)}.")
            for d, (old, new) in enumerate(zip(tensor.shape_signature, new_shape)):
                if old != -1 and old != new:
                    raise RuntimeError(f"ResizeInputTensorStrict only allows mutating unknown dimensions "
                                       f"identified by -1 (dimension {d}).")
        self._graph = _reshaped(self._model, self._graph, {input_index: new_shape})
        self._compiled = None
        self._values.pop(input_index, None)

    # -- data --------------------------------------------------------------------------------------------
    def set_tensor(self, tensor_index: int, value: Any) -> None:
        if not 0 <= tensor_index < len(self._graph.tensors):
            raise ValueError(f"Tensor index {tensor_index} out of range (0..{len(self._graph.tensors) - 1})")
        tensor = self._graph.tensors[tensor_index]
        value = np.asarray(value)
        if value.dtype != tensor.dtype:
            raise ValueError(f"Cannot set tensor: Got value of type {_type_name(value.dtype)} but expected type "
                             f"{_type_name(tensor.dtype)} for input {tensor_index}, name: {tensor.name} ")
        if value.ndim != len(tensor.shape):
            raise ValueError(f"Cannot set tensor: Dimension mismatch. Got {value.ndim} but expected "
                             f"{len(tensor.shape)} for input {tensor_index}.")
        for d, (got, want) in enumerate(zip(value.shape, tensor.shape)):
            if got != want:
                raise ValueError(f"Cannot set tensor: Dimension mismatch. Got {got} but expected {want} for "
                                 f"dimension {d} of input {tensor_index}.")
        if tensor_index not in self._graph.inputs:
            raise ValueError(f"Tensor {tensor_index} ({tensor.name!r}) is not an input; gpuengine only accepts "
                             "values for model inputs")
        if self._compiled is None:
            raise ValueError("Cannot set tensor: allocate_tensors() must be called first")
        self._values[tensor_index] = np.array(value, copy=True)

    def invoke(self) -> None:
        """Run the model once (blocking). Invokes of one Interpreter from several threads take turns; set_tensor /
        get_tensor around them are not atomic, as in LiteRT: give each thread its own Interpreter."""
        compiled = self._require_allocated()
        with self._invoke_lock:
            feeds = {t: self._values[t] for t in self._graph.inputs}
            self._outputs = compiled.run(feeds)

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        return np.array(self._lookup(tensor_index), copy=True)

    def tensor(self, tensor_index: int) -> Any:
        """A function returning a live view of the tensor (inputs can be written through it, as in LiteRT)."""
        self._lookup(tensor_index)
        return lambda: self._lookup(tensor_index)

    def _lookup(self, t: int) -> np.ndarray:
        if not 0 <= t < len(self._graph.tensors):
            raise ValueError(f"Tensor index {t} out of range (0..{len(self._graph.tensors) - 1})")
        for source in (self._outputs, self._values):
            if t in source:
                return source[t]
        tensor = self._graph.tensors[t]
        if tensor.data is not None:
            return np.asarray(tensor.data)
        if self._compiled is not None and tensor.data is None:
            folded = self._compiled.graph.tensors[t].data
            if folded is not None:
                return np.asarray(folded)
        if t in self._graph.outputs:
            raise ValueError(f"Tensor {t} ({tensor.name!r}) is an output with no value yet: call invoke() first")
        raise ValueError(f"Tensor {t} ({tensor.name!r}) is an intermediate kept on the GPU and is not "
                         "readable; read model outputs, or make it an output of the model")

    # -- details -----------------------------------------------------------------------------------------
    def get_input_details(self) -> list[dict[str, Any]]:
        return [tensor_details(self._graph.tensors[t]) for t in self._graph.inputs]

    def get_output_details(self) -> list[dict[str, Any]]:
        return [tensor_details(self._graph.tensors[t]) for t in self._graph.outputs]

    def get_tensor_details(self) -> list[dict[str, Any]]:
        return [tensor_details(t) for t in self._graph.tensors]

    def num_subgraphs(self) -> int:
        return len(self._model.subgraphs)

    def reset_all_variables(self) -> None:
        """Variables live in CPU partitions (LiteRT); a rebuild resets them."""
        self._compiled = None
        self.allocate_tensors()

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        return {s.key: {"inputs": sorted(s.inputs), "outputs": sorted(s.outputs)} for s in self._model.signatures}

    def get_signature_runner(self, signature_key: str | None = None) -> SignatureRunner:
        sigs = {s.key: s for s in self._model.signatures}
        if not sigs:
            raise ValueError("SignatureDef signature_key is None and model has no Signature Def")
        if signature_key is None:
            if len(sigs) > 1:
                raise ValueError("SignatureDef signature_key is None and model has multiple Signature Defs")
            signature_key = next(iter(sigs))
        if signature_key not in sigs:
            raise ValueError(f"Invalid signature_key provided: {signature_key!r}; available: {sorted(sigs)}")
        if signature_key not in self._runners:
            self._runners[signature_key] = SignatureRunner(self, sigs[signature_key])
        return self._runners[signature_key]

    # -- engine extras -----------------------------------------------------------------------------------
    @property
    def compiled(self) -> CompiledGraph:
        return self._require_allocated()

    def describe(self) -> str:
        """Human-readable report: adapter, partitions, dispatches, memory."""
        c = self._require_allocated()
        plan = c.plan
        lines = [f"adapter: {c.gpu.name if c.gpu else 'none (no GPU partition)'}",
                 f"target: {c.target.describe() if c.target else 'none'}",
                 f"precision: {c.precision}" + (f" (asked for {self._options.precision})"
                                                if c.precision != self._options.precision else ""),
                 f"ops: {len(plan.graph.ops)} after load-time folding ({plan.ops_gpu} on GPU), "
                 f"dispatches per invoke: {c.dispatches}, compile: {c.compile_ms:.0f} ms"]
        for k, p in enumerate(plan.partitions):
            names = [plan.graph.ops[i].code for i in p.ops]
            lines.append(f"partition {k} [{p.device}]: {len(p.ops)} ops: {', '.join(names[:12])}"
                         + (" ..." if len(names) > 12 else ""))
        for name, reason in plan.unsupported.items():
            lines.append(f"on CPU: {name}: {reason}")
        for prog in c.gpu_programs:
            mem = prog.info.plan
            lines.append(f"memory ({mem.strategy}): {mem.total_bytes} bytes in {mem.num_objects} objects "
                         f"for {len(prog.info.records)} tensors")
        return "\n".join(lines)


class SignatureRunner:
    """LiteRT's SignatureRunner: call with named inputs, get a dict of named outputs."""

    def __init__(self, interpreter: Interpreter, sig: Any) -> None:
        self._interpreter, self._sig = interpreter, sig
        graph = interpreter._model.subgraphs[sig.subgraph]
        extra = [t for t in sig.outputs.values() if t not in graph.outputs]
        if extra:  # a signature output that is not a graph output must still come back from the GPU
            graph = graph.copy()
            graph.outputs = graph.outputs + extra
        self._graph = graph
        self._compiled: CompiledGraph | None = None

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        return {n: tensor_details(self._graph.tensors[t]) for n, t in sorted(self._sig.inputs.items())}

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        return {n: tensor_details(self._graph.tensors[t]) for n, t in sorted(self._sig.outputs.items())}

    def __call__(self, **kwargs: Any) -> dict[str, np.ndarray]:
        missing = set(self._sig.inputs) - set(kwargs)
        if missing:
            raise ValueError(f"Missing inputs for signature {self._sig.key!r}: {sorted(missing)}")
        unknown = set(kwargs) - set(self._sig.inputs)
        if unknown:
            raise ValueError(f"Invalid Input name ({sorted(unknown)[0]}) for SignatureDef")
        if self._compiled is not None and self._compiled.gpu is not None and self._compiled.gpu.lost:
            self._compiled = None  # the last call found the GPU lost: compile again on a new device
        if self._compiled is None:
            self._compiled = CompiledGraph(self._graph, self._interpreter._options, self._interpreter._num_threads)
        feeds = {}
        for name, t in self._sig.inputs.items():
            tensor = self._graph.tensors[t]
            value = np.asarray(kwargs[name])
            if value.dtype != tensor.dtype or value.shape != tensor.shape:
                raise ValueError(f"Input {name!r} must be {tensor.dtype} of shape {tensor.shape}, got "
                                 f"{value.dtype} {value.shape}")
            feeds[t] = value
        outputs = self._compiled.run(feeds)
        return {name: outputs[t] for name, t in self._sig.outputs.items()}


def _type_name(dtype: np.dtype) -> str:
    from .model.ir import DTYPE_TO_TYPE

    return _TYPE_NAMES.get(DTYPE_TO_TYPE.get(np.dtype(dtype), -1), str(dtype).upper())


def _reshaped(model: Model, graph: Graph, shapes: dict[int, tuple[int, ...]]) -> Graph:
    """Re-derive every tensor shape after an input resize, using LiteRT's shape inference."""
    import dataclasses

    from .model.builder import write_model

    try:
        from ai_edge_litert.interpreter import Interpreter as LiteRT
    except ImportError as e:
        raise UnsupportedOpError("resize_tensor_input needs LiteRT's shape inference: "
                                 "pip install 'gpuengine[litert]'") from e
    current = Model(subgraphs=[graph], signatures=[], metadata={})
    ref = LiteRT(model_content=write_model(current))
    for t, shape in shapes.items():
        ref.resize_tensor_input(t, list(shape))
    try:
        ref.allocate_tensors()
        # Shapes computed at run time (RESHAPE fed by SHAPE) are only final after one invoke.
        for d in ref.get_input_details():
            ref.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        ref.invoke()
    except (RuntimeError, ValueError) as e:
        raise ModelError(f"the model cannot run with input shapes {shapes}: {e}") from e
    new = graph.copy()
    for d in ref.get_tensor_details():
        t = new.tensors[d["index"]]
        if t.data is None:
            new.tensors[d["index"]] = dataclasses.replace(t, shape=tuple(int(x) for x in d["shape"]))
    return new
