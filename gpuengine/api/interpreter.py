"""A drop-in for ai_edge_litert.interpreter.Interpreter that runs the model on the GPU through WebGPU.

Swap `from ai_edge_litert.interpreter import Interpreter` for `from gpuengine import Interpreter`; engine
extras are keyword options (adapter, target, precision, memory_strategy, workgroup_cache, optimize,
hybrid_arithmetic, device_profile: "baseline" opens a device with no optional feature and WebGPU's default
limits).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GpuEngineError, ModelError
from ..model import validate
from ..model.ir import Graph, Model, Tensor
from ..model.reader import read_model
from ..model.shapes import shape_key
from ..options import EngineOptions, engine_options, f32_tensor_names
from ..planning import ShapeCache, describe_control, prepare, probe_shapes
from ..runtime.bounds import IndexChecks
from ..runtime.graph import CompiledGraph, InvokeJob, for_adapter
from ..runtime.program import GpuProgram
from ..runtime.symbolic_plan import Buffers, SymbolicPlan, plan_for
from ..runtime.webgpu import is_buffer
from .tensor_buffer import TensorBuffer

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


# Input shapes whose compiled programs (GPU buffers included) an Interpreter keeps: a resize back to one of them
# allocates nothing; beyond this many, the least recently used is dropped.
COMPILED_SHAPES = 4


def gpu_readers(compiled: CompiledGraph, t: int, tensor: Tensor, what: str) -> list[GpuProgram]:
    """The GPU programs reading input tensor t, or the ValueError saying the host must provide it (a CPU partition
    reads it, or it is not float32)."""
    gpu = compiled.gpu_programs
    progs = [p for p in gpu if t in p.inputs]
    on_cpu = any(t in p.part.inputs for p in compiled.programs if p not in gpu)
    if not progs or on_cpu or tensor.dtype not in (np.float32, np.int32):
        raise ValueError(f"{what} is read by the CPU fallback or is neither float32 nor int32: only float and "
                         "int32 inputs of GPU partitions can live in GPU buffers")
    return progs


def checked_input_buffer(buffer: Any, tensor: Tensor, what: str, device: Any) -> Any:
    """The wgpu.GPUBuffer a set_input_buffer() call may bind to `tensor` (a TensorBuffer unwrapped), or the
    ValueError saying why not: stale, another dtype, not a buffer, another device, too small, not STORAGE."""
    import wgpu

    if isinstance(buffer, TensorBuffer):
        if buffer.destroyed:
            raise ValueError("TensorBuffer has been destroyed")
        owner = buffer.owner() if buffer.owner is not None else buffer
        if owner is None or (buffer.owner is not None and not owner.issued(buffer.generation)):
            raise ValueError("this GPU buffer came from an interpreter or runner that has been re-allocated or "
                             "deleted since (buffers are valid until it compiles again); ask for it again")
        if np.dtype(buffer.dtype) != tensor.dtype:
            raise ValueError(f"{what} is {tensor.dtype}, the buffer holds {buffer.dtype}")
        buffer = buffer.capsule
    if not is_buffer(buffer):
        raise ValueError(f"set_input_buffer needs a wgpu.GPUBuffer or an output_buffer(), got {type(buffer).__name__}")
    if buffer._device is not device:  # noqa: SLF001
        raise ValueError("the buffer belongs to another GPU device than this interpreter's; create the "
                         "interpreters with device=gpuengine.get_device() to share one")
    need = tensor.size * 4
    if buffer.size < need:
        raise ValueError(f"{what} ({tensor.shape} float32) needs {need} bytes, the buffer has {buffer.size}")
    if not buffer.usage & wgpu.BufferUsage.STORAGE:
        raise ValueError("the buffer needs STORAGE usage to be read by the model's kernels")
    return buffer


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
                 device: Any = None, max_inflight: int = 2,
                 f32_tensors: str | os.PathLike | Iterable[str | int] | None = None,
                 hybrid_arithmetic: str | None = None, device_profile: str | None = None,
                 sparse_blocks: float | None = None, webgpu: str | None = None) -> None:
        """LiteRT's arguments are accepted for drop-in use (the experimental ones change nothing here: the
        GPU partitioning replaces LiteRT's delegates); engine options are keyword-only."""
        if (model_path is None) == (model_content is None):
            raise ValueError("Exactly one of model_path or model_content must be given")
        options = engine_options(adapter=adapter, precision=precision, memory_strategy=memory_strategy,
                                 workgroup_cache=workgroup_cache, optimize=optimize, target=target, device=device,
                                 max_inflight=max_inflight, hybrid_arithmetic=hybrid_arithmetic,
                                 device_profile=device_profile, sparse_blocks=sparse_blocks, webgpu=webgpu)
        self._model: Model = read_model(model_path if model_path is not None else model_content)
        validate.validate_model(self._model)  # op level, before partitioning, the CPU fallback or codegen see it
        self._options = dataclasses.replace(options, f32_tensors=f32_tensor_names(self._model.main, f32_tensors))
        self._num_threads = num_threads
        self._graph: Graph = self._model.main  # with the shapes of the last allocate_tensors() (and resizes since)
        self._shapes = {t: tuple(self._graph.tensors[t].shape) for t in self._graph.inputs}  # as resized
        self._shape_cache = ShapeCache()  # plans per input shapes: a shape seen before compiles nothing again
        self._probed = False  # parametric kernels made (or found needless) for this model
        self._symbolic_plan: SymbolicPlan | str | None = None  # made once: new sizes evaluated, not planned
        self._plan_buffers = Buffers()  # the arena and input buffers this interpreter's sizes share
        self._model_source = model_content if model_content is not None else model_path  # the plan cache's key
        self._compiled: CompiledGraph | None = None
        # what allocate_tensors built for the last few input shapes, so going back to one builds nothing
        self._compiled_by_shape: OrderedDict[Any, tuple[Graph, CompiledGraph, IndexChecks]] = OrderedDict()
        self._values: dict[int, np.ndarray] = {}
        self._outputs: dict[int, np.ndarray] = {}
        self._runners: dict[str, SignatureRunner] = {}
        self._invoke_lock = threading.Lock()
        self._generation = 0  # allocate_tensors() calls: GPU buffers handed out are valid within one
        self._bound: set[int] = set()  # input tensors read from a user's GPU buffer or written on the GPU
        self._index_checks: IndexChecks | None = None  # host-fed token ids / positions checked before upload

    # -- what its signature runners and CompiledModel read ---------------------------------------------------
    @property
    def parsed_model(self) -> Model:
        """The model as read and validated (all subgraphs, signatures)."""
        return self._model

    @property
    def engine_options(self) -> EngineOptions:
        """The engine options as parsed (options.engine_options), with the adapter's latency description once
        something compiled."""
        return self._options

    @property
    def num_threads(self) -> int | None:
        """The CPU fallback's thread count (LiteRT's num_threads)."""
        return self._num_threads

    def adapted_options(self) -> EngineOptions:
        """The options with the latency description of the adapter it runs on (runtime.graph.for_adapter), kept
        for the next compilation."""
        self._options = for_adapter(self._options)
        return self._options

    def issued(self, generation: int) -> bool:
        """Whether GPU buffers handed out in `generation` (TensorBuffer.generation) are still valid: compiled, and
        not re-allocated since."""
        return self._generation == generation and self._compiled is not None

    # -- setup -------------------------------------------------------------------------------------------
    def allocate_tensors(self) -> None:
        """Compile the model (once), or again on a new device when the GPU it ran on was lost. GPU buffers handed
        out before (input_buffer, output_buffer) and inputs bound to a user's buffer stop being valid."""
        if self._compiled is not None and self._compiled.gpu is not None and not self._compiled.gpu.alive():
            if self._options.device is not None:
                raise RuntimeError("the GPU device passed as device= was lost; create a new one "
                                   "(gpuengine.get_device()) and a new Interpreter on it")
            self._compiled = None
            self._compiled_by_shape.clear()
        self._generation += 1
        self._release_bindings()
        if self._compiled is None:
            self._options = for_adapter(self._options)  # fusions decided for the adapter's latency description
            key = shape_key(self._shapes)
            built = self._compiled_by_shape.get(key)
            if built is None or (built[1].gpu is not None and not built[1].gpu.alive()):
                built = self._from_symbolic_plan()
            if built is None or (built[1].gpu is not None and not built[1].gpu.alive()):
                entry = prepare(self._model.main, self._shapes, self._options, self._model, self._shape_cache)
                compiled = CompiledGraph(entry.graph, self._options, self._num_threads, model=self._model,
                                         plan=entry.plan, probes=self._probe_plans())
                built = (entry.graph, compiled, IndexChecks(entry.graph))
                self._make_symbolic_plan(compiled)
            self._compiled_by_shape[key] = built
            self._compiled_by_shape.move_to_end(key)
            while len(self._compiled_by_shape) > COMPILED_SHAPES:
                self._compiled_by_shape.popitem(last=False)
            self._graph, self._compiled, self._index_checks = built
        for t in self._graph.inputs:
            tensor = self._graph.tensors[t]
            if t not in self._values or self._values[t].shape != tensor.shape:
                self._values[t] = np.zeros(tensor.shape, tensor.dtype)

    def _from_symbolic_plan(self) -> tuple[Graph, CompiledGraph, IndexChecks] | None:
        """A new size of a model with a symbolic plan (runtime/symbolic_plan.py): its expressions evaluated, no
        planning; None without a plan, on a lost device, or outside the plan's sampled range."""
        plan = self._symbolic_plan
        if not isinstance(plan, SymbolicPlan) or not plan.template.gpu.alive():
            return None
        try:
            got = plan.at(self._shapes, self._model.main, self._plan_buffers)
        except (GpuEngineError, ValueError, TypeError, ArithmeticError, LookupError) as e:
            # never a crash for a plan that cannot serve a size: this interpreter plans each size from now on
            self._symbolic_plan = f"it failed at input shapes {self._shapes}: {type(e).__name__}: {e}"
            return None
        if got is None:
            return None
        graph, compiled = got
        return graph, compiled, IndexChecks(graph)

    def _make_symbolic_plan(self, compiled: CompiledGraph) -> None:
        """Once, after the first size of a model with symbolic input sizes compiled: its symbolic plan, or why it
        has none (the reason inspect shows)."""
        if isinstance(self._symbolic_plan, SymbolicPlan) and not self._symbolic_plan.template.gpu.alive():
            self._symbolic_plan, self._plan_buffers = None, Buffers()  # the device was lost: made on the new one
        if self._symbolic_plan is not None or not compiled.symbolic_inputs:
            return
        try:
            source = self._model_source
            content = source if isinstance(source, bytes | bytearray) else Path(source).read_bytes()  # type: ignore
            digest = hashlib.blake2b(bytes(content), digest_size=16).digest()
            self._symbolic_plan = plan_for(digest, self._model, self._shapes, self._options, compiled)
        except (GpuEngineError, ValueError, TypeError, ArithmeticError, LookupError, np.linalg.LinAlgError) as e:
            self._symbolic_plan = f"making it failed: {type(e).__name__}: {e}"  # each size planned, as before

    @property
    def symbolic_plan(self) -> SymbolicPlan | str | None:
        """The plan new input sizes are evaluated from (runtime/symbolic_plan.py), why the model has none (a
        string), or None before a model with symbolic input sizes compiled."""
        return self._symbolic_plan

    def _probe_plans(self) -> list[Any]:
        """The first time a model with symbolic input sizes compiles: its plans at other sizes, from which its
        kernels' parametric versions are made (runtime/graph.py seed_parametric); empty otherwise."""
        if self._probed:
            return []
        self._probed = True
        plans = []
        for shapes in probe_shapes(self._model.main, self._model, self._shapes):
            try:
                plans.append(prepare(self._model.main, shapes, self._options, self._model).plan)
            except GpuEngineError:
                continue
        return plans

    def _release_bindings(self) -> None:
        """Inputs bound to a user's GPU buffer read their host value again (a new allocation or input shape)."""
        if self._compiled is not None:
            for t in self._bound:
                for prog in self._compiled.gpu_programs:
                    if t in prog.inputs:
                        prog.bind_input(t, None)
        self._bound.clear()

    def _require_allocated(self) -> CompiledGraph:
        if self._compiled is None:
            raise RuntimeError("Invoke called on model that is not ready. Call allocate_tensors() first.")
        return self._compiled

    def resize_tensor_input(self, input_index: int, tensor_size: Any, strict: bool = False) -> None:
        """Change an input's shape; allocate_tensors() then derives every other shape (model/shapes.py) and compiles
        for it, or takes what it compiled for these input shapes before (the shape cache)."""
        if input_index not in self._graph.inputs:
            raise RuntimeError(f"Tensor {input_index} is not an input of the model; only inputs can be resized")
        new_shape = tuple(int(d) for d in tensor_size)
        tensor = self._graph.tensors[input_index]
        if new_shape == tensor.shape:
            return
        if any(d < 0 for d in new_shape):
            raise ValueError(f"Cannot resize input {input_index} to {list(new_shape)}: dimensions must be >= 0")
        signature = self._model.main.tensors[input_index].shape_signature
        if strict and signature is not None:
            if len(new_shape) != len(signature):
                raise RuntimeError(f"ResizeInputTensorStrict: rank {len(new_shape)} differs from the input's "
                                   f"rank {len(signature)}.")
            for d, (old, new) in enumerate(zip(signature, new_shape)):
                if old != -1 and old != new:
                    raise RuntimeError(f"ResizeInputTensorStrict only allows mutating unknown dimensions "
                                       f"identified by -1 (dimension {d}).")
        # refuse a size this process cannot hold before anything is planned or allocated for it
        need = validate.tensor_bytes(dataclasses.replace(tensor, shape=new_shape))
        available = validate.available_bytes()
        if need > available:
            raise ModelError(f"input {input_index} ({tensor.name!r}) resized to {new_shape} {tensor.dtype} would "
                             f"need {need:,} bytes, more than the {available:,} this process can allocate")
        self._shapes[input_index] = new_shape
        self._graph = dataclasses.replace(self._graph, tensors=list(self._graph.tensors))
        self._graph.tensors[input_index] = dataclasses.replace(tensor, shape=new_shape)
        self._release_bindings()
        self._compiled = None
        self._values.pop(input_index, None)

    @property
    def shape_cache(self) -> dict[str, int]:
        """{"hits", "misses", "entries"} of the plans kept per input shapes (allocate_tensors after a resize)."""
        return self._shape_cache.report()

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
        if tensor_index in self._bound:  # a host value again: upload it, no longer read from a GPU buffer
            self._bind(tensor_index, None)

    def invoke(self) -> None:
        """Run the model once (blocking). Invokes of one Interpreter from several threads take turns; set_tensor /
        get_tensor around them are not atomic, as in LiteRT: give each thread its own Interpreter."""
        compiled = self._require_allocated()
        with self._invoke_lock:
            feeds = {t: self._values[t] for t in self._graph.inputs}
            if self._index_checks:
                self._index_checks.check(feeds)
            self._outputs = compiled.run(feeds)

    def invoke_async(self, feeds: dict[int, Any] | None = None, read_outputs: bool = True) -> InvokeJob:
        """Start an invoke and return at once: `job.result()` blocks for {output tensor index: array},
        `job.done()` tells without blocking. feeds: {input tensor index: value} for this invoke only (others:
        the values set_tensor gave). Up to `max_inflight` invokes are in flight, each with its own staging buffer,
        so the next one is uploaded and recorded while the GPU runs this one; submitting more first collects the
        oldest (its result is kept). read_outputs=False: the outputs stay on the GPU (output_buffer) and
        result() only waits, returning {}: a model whose outputs feed another on the GPU needs no readback.
        Results equal those of invoke(); get_tensor() is only updated by invoke(). A model with CPU partitions
        runs to the end inside this call."""
        compiled = self._require_allocated()
        values = {t: self._values[t] for t in self._graph.inputs}
        for t, value in (feeds or {}).items():
            values[t] = self._checked(t, value)
        if self._index_checks:
            self._index_checks.check(values)
        with self._invoke_lock:
            return compiled.submit(values, read_outputs)

    # -- GPU-resident inputs and outputs (positions as in get_input_details / get_output_details) -------------
    def output_buffer(self, i: int) -> TensorBuffer:
        """The GPU buffer holding output i (its position in get_output_details()) after each invoke, BHWC
        row-major, and its dtype, as a TensorBuffer (`.buffer`, `.dtype`, `read()`; a CompiledModel's input as it
        is); valid until the next allocate_tensors()."""
        t = self._position(i, self._graph.outputs, "output")
        prog = next((p for p in self._require_allocated().gpu_programs if t in p.outputs), None)
        if prog is None:
            raise ValueError(f"output {i} ({self._graph.tensors[t].name!r}) is not computed on the GPU (it comes "
                             "from the CPU fallback or is a constant): read it with get_tensor()")
        if self._graph.tensors[t].dtype != np.float32:
            raise ValueError(f"output {i} ({self._graph.tensors[t].name!r}) is {self._graph.tensors[t].dtype}: the GPU "
                             "holds a quantized tensor's real values, so only float32 outputs live in GPU buffers; "
                             "read it with get_tensor()")
        return TensorBuffer(prog.output_buffer(t), self._graph.tensors[t].dtype, self._graph.tensors[t].shape,
                            weakref.ref(self), self._generation)

    def input_buffer(self, i: int) -> TensorBuffer:
        """The GPU buffer input i (its position in get_input_details()) is read from, BHWC row-major, and its
        dtype. Asking for it hands the input over to the GPU: invokes stop uploading the host value (write the
        buffer on the device yourself) until set_tensor() gives it a host value again. Valid until the next
        allocate_tensors()."""
        t, progs = self._gpu_input(i)
        self._bound.add(t)
        for prog in progs:
            prog.set_resident(t, True)
        return TensorBuffer(progs[0].input_buffer(t), self._graph.tensors[t].dtype, self._graph.tensors[t].shape,
                            weakref.ref(self), self._generation)

    def set_input_buffer(self, i: int, buffer: Any) -> None:
        """Read input i (its position in get_input_details()) from a GPU buffer, without a copy: a
        wgpu.GPUBuffer of this interpreter's device with STORAGE usage holding the tensor as BHWC row-major
        float32, or another interpreter's output_buffer() (chaining models on the GPU). The binding lasts until
        set_tensor() gives the input a host value or allocate_tensors() is called."""
        t, progs = self._gpu_input(i)
        tensor = self._graph.tensors[t]
        buffer = checked_input_buffer(buffer, tensor, f"input {i} ({tensor.name!r})", self._compiled.gpu.device)
        for prog in progs:
            prog.bind_input(t, buffer)
        self._bound.add(t)

    def _bind(self, t: int, buffer: Any | None) -> None:
        for prog in self._require_allocated().gpu_programs:
            if t in prog.inputs:
                prog.bind_input(t, buffer)
        if buffer is None:
            self._bound.discard(t)

    def _position(self, i: int, tensors: list[int], role: str) -> int:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(tensors):
            raise ValueError(f"{role} position {i!r} out of range: the model has {len(tensors)} {role}s")
        return tensors[i]

    def _gpu_input(self, i: int) -> tuple[int, list[Any]]:
        """Input i's tensor and the GPU programs reading it; ValueError when the host must provide it."""
        t = self._position(i, self._graph.inputs, "input")
        tensor = self._graph.tensors[t]
        return t, gpu_readers(self._require_allocated(), t, tensor, f"input {i} ({tensor.name!r}, {tensor.dtype})")

    def _checked(self, t: int, value: Any) -> np.ndarray:
        """A host value for input tensor t, checked as set_tensor checks it."""
        if t not in self._graph.inputs:
            raise ValueError(f"Tensor {t} is not an input of the model; feeds are keyed by input tensor index")
        tensor = self._graph.tensors[t]
        value = np.asarray(value)
        if value.dtype != tensor.dtype or value.shape != tensor.shape:
            raise ValueError(f"Cannot set tensor: input {t} ({tensor.name!r}) needs {tensor.dtype} of shape "
                             f"{tensor.shape}, got {value.dtype} of shape {value.shape}")
        return value

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
        self._compiled_by_shape.clear()
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
                 *([f"device: {c.gpu.describe()}"] if c.gpu else []),
                 *[f"kernel variants: {note}" for note in c.variant_notes()],
                 f"target: {c.target.describe() if c.target else 'none'}",
                 f"precision: {c.precision}" + (f" (asked for {self._options.precision})"
                                                if c.precision != self._options.precision else "")
                 + (f", mixed: {c.f32_tensors} stored tensors kept in f32" if c.f32_tensors else ""),
                 f"ops: {len(plan.graph.ops)} after load-time folding ({plan.ops_gpu} on GPU), "
                 f"dispatches per invoke: {c.dispatches}"
                 + (f" (+ {sum(len(q.dispatches) for q in c.all_gpu_programs) - c.dispatches} in WHILE/IF "
                    "subgraphs, run as often as the host decides)" if c.control_programs else "")
                 + f", compile: {c.compile_ms:.0f} ms"]
        for k, p in enumerate(plan.partitions):
            names = [plan.graph.ops[i].code for i in p.ops]
            if p.device == "control":
                lines.append(f"partition {k} [gpu, driven by the host]: {describe_control(plan.control[p.ops[0]])}")
                continue
            lines.append(f"partition {k} [{p.device}]: {len(p.ops)} ops: {', '.join(names[:12])}"
                         + (" ..." if len(names) > 12 else ""))
            lines += [f"  spatially sparse (LASNet), S={m.patch}: {len(m.block.ops)} ops from op {i} (indirect "
                      "dispatches in the partition's program)" for i, m in sorted(plan.sparse.items())
                      if p.device == "gpu" and i in p.ops]
        for name, reason in plan.unsupported.items():
            lines.append(f"on CPU: {name}: {reason}")
        for prog in c.gpu_programs:
            mem = prog.info.plan
            lines.append(f"memory ({mem.strategy}): {mem.total_bytes} bytes in {mem.num_objects} objects "
                         f"for {len(prog.info.records)} tensors")
        cache = self._shape_cache.report()
        lines.append(f"shape cache: {cache['entries']} input shapes planned, {cache['hits']} hits, "
                     f"{cache['misses']} misses")
        return "\n".join(lines)


class SignatureRunner:
    """LiteRT's SignatureRunner: call with named inputs, get a dict of named outputs.

    Engine extras for loops whose state stays on the GPU (a decode loop's KV cache), keyed by signature names:
    `output_buffer(name)` / `input_buffer(name)` / `set_input_buffer(name, buffer)` as the Interpreter's, and
    `run(feeds, outputs=[...])`, which reads back only the outputs named. Binding an input to this runner's own
    output buffer (`r.set_input_buffer("kv_cache_k_0", r.output_buffer("kv_cache_k_0"))`) feeds each call the
    previous call's output, copied on the GPU.
    """

    def __init__(self, interpreter: Interpreter, sig: Any) -> None:
        self._interpreter, self._sig = interpreter, sig
        graph = interpreter.parsed_model.subgraphs[sig.subgraph]
        extra = [t for t in sig.outputs.values() if t not in graph.outputs]
        if extra:  # a signature output that is not a graph output must still come back from the GPU
            graph = graph.copy()
            graph.outputs = graph.outputs + extra
        self._base = graph
        self._graph = graph
        self._compiled: CompiledGraph | None = None
        self._shape_cache = ShapeCache()
        self._index_checks: IndexChecks | None = None
        self._names = {t: n for n, t in sig.inputs.items()}
        self._generation = 0  # compilations: GPU buffers handed out are valid within one
        self._bound: set[int] = set()  # inputs read from a GPU buffer (not given by the caller)

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        return {n: tensor_details(self._graph.tensors[t]) for n, t in sorted(self._sig.inputs.items())}

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        return {n: tensor_details(self._graph.tensors[t]) for n, t in sorted(self._sig.outputs.items())}

    def __call__(self, **kwargs: Any) -> dict[str, np.ndarray]:
        return self.run(kwargs)

    def run(self, feeds: dict[str, Any] | None = None, outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Run the signature: feeds by input name (inputs bound to GPU buffers may be left out; a value given for
        one uploads it again and ends the binding); outputs: the names to read back (None: all), the others stay
        on the GPU (output_buffer)."""
        feeds = dict(feeds or {})
        unknown = set(feeds) - set(self._sig.inputs)
        if unknown:
            raise ValueError(f"Invalid Input name ({sorted(unknown)[0]}) for SignatureDef")
        if self._compiled is not None and self._compiled.gpu is not None and self._compiled.gpu.lost:
            self._compiled = None  # the last call found the GPU lost: compile again on a new device
            self._bound.clear()
        missing = {n for n, t in self._sig.inputs.items() if n not in feeds and t not in self._bound}
        if missing:
            raise ValueError(f"Missing inputs for signature {self._sig.key!r}: {sorted(missing)}")
        wanted = None if outputs is None else list(outputs)
        if wanted is not None and set(wanted) - set(self._sig.outputs):
            raise ValueError(f"Invalid output name ({sorted(set(wanted) - set(self._sig.outputs))[0]}) for "
                             f"signature {self._sig.key!r}; outputs: {sorted(self._sig.outputs)}")
        values = {}
        for name, value in feeds.items():
            t = self._sig.inputs[name]
            tensor = self._graph.tensors[t]
            value = np.asarray(value)
            if value.dtype != tensor.dtype:
                raise ValueError(f"Input {name!r} must be {tensor.dtype} of shape {tensor.shape}, got "
                                 f"{value.dtype} {value.shape}")
            values[t] = value
        shapes = {t: tuple(v.shape) for t, v in values.items()}
        if self._compiled is None or any(tuple(self._graph.tensors[t].shape) != s for t, s in shapes.items()):
            # inputs of another shape resize the signature's graph, as LiteRT's runner does (the shape cache keeps
            # the plans of every shape seen); bound inputs keep their shapes
            for t in self._sig.inputs.values():
                shapes.setdefault(t, tuple(self._graph.tensors[t].shape))
            self.compile_for(shapes)
        for t in [t for t in values if t in self._bound]:  # a host value again: upload it
            self.bind_input(t, None)
        self.check_indices(values)
        compiled = self._compiled
        program = compiled.sole_gpu_program
        if program is not None:  # read back only what is asked for
            program.set_readback(None if wanted is None else {self._sig.outputs[n] for n in wanted})
            got = program.run(values)
            return {name: got[t] if t in got else compiled.constants[t] for name, t in self._sig.outputs.items()
                    if wanted is None or name in wanted}
        got = compiled.run(values)
        return {name: got[t] for name, t in self._sig.outputs.items() if wanted is None or name in wanted}

    def submit(self, feeds: dict[str, Any] | None = None, after: Iterable[Any] = ()) -> Any:
        """Run the signature without waiting and without reading anything back (the outputs stay in their GPU
        buffers); `after`: the caller's wgpu command buffers, run right after the signature in the same queue
        submission (a decode loop's sampler reading the logits and writing the next step's token). Only for a
        signature that is one GPU program at the shapes it was compiled for; returns a job whose `done` says
        when the GPU has finished it."""
        feeds = dict(feeds or {})
        compiled = self.compiled
        program = compiled.sole_gpu_program
        if program is None:
            raise ValueError(f"signature {self._sig.key!r} is not one GPU program (it has CPU partitions): "
                             "use run()")
        unknown = set(feeds) - set(self._sig.inputs)
        if unknown:
            raise ValueError(f"Invalid Input name ({sorted(unknown)[0]}) for SignatureDef")
        missing = {n for n, t in self._sig.inputs.items() if n not in feeds and t not in self._bound}
        if missing:
            raise ValueError(f"Missing inputs for signature {self._sig.key!r}: {sorted(missing)}")
        values = {}
        for name, value in feeds.items():
            t = self._sig.inputs[name]
            tensor = self._graph.tensors[t]
            value = np.asarray(value)
            if value.dtype != tensor.dtype or tuple(value.shape) != tuple(tensor.shape):
                raise ValueError(f"Input {name!r} must be {tensor.dtype} of shape {tensor.shape}, got "
                                 f"{value.dtype} {value.shape}")
            if t in self._bound:
                self.bind_input(t, None)
            values[t] = value
        self.check_indices(values)
        return program.submit(values, read=False, after=tuple(after))

    def compile_for(self, shapes: dict[int, tuple[int, ...]]) -> CompiledGraph:
        """Compile the signature for these input shapes (tensor index -> shape); buffers handed out and
        bindings belong to the previous compilation."""
        interpreter = self._interpreter
        options = interpreter.adapted_options()
        entry = prepare(self._base, shapes, options, interpreter.parsed_model, self._shape_cache)
        self._graph = entry.graph
        self._compiled = CompiledGraph(entry.graph, options, interpreter.num_threads, model=interpreter.parsed_model,
                                       plan=entry.plan)
        self._index_checks = IndexChecks(entry.graph)
        self._generation += 1  # buffers handed out and bindings belong to the previous compilation
        self._bound.clear()
        return self._compiled

    # -- GPU-resident inputs and outputs, by signature name ---------------------------------------------------
    def output_buffer(self, name: str) -> TensorBuffer:
        """The GPU buffer holding output `name` after each call (BHWC row-major float32); valid until the
        runner compiles again (inputs of another shape)."""
        t = self._name(name, self._sig.outputs, "output")
        compiled = self.compiled
        prog = next((p for p in compiled.gpu_programs if t in p.outputs), None)
        tensor = self._graph.tensors[t]
        if prog is None or tensor.dtype != np.float32:
            raise ValueError(f"output {name!r} ({tensor.dtype}) is not a float32 output computed on the GPU: "
                             "read it from the call's result")
        return TensorBuffer(prog.output_buffer(t), tensor.dtype, tensor.shape, weakref.ref(self), self._generation)

    def input_buffer(self, name: str) -> TensorBuffer:
        """The GPU buffer input `name` is read from; asking for it hands the input to the GPU (calls stop
        uploading it: write the buffer on the device) until a call gives it a host value again."""
        t, progs = self._gpu_input(name)
        for prog in progs:
            prog.set_resident(t, True)
        self._bound.add(t)
        tensor = self._graph.tensors[t]
        return TensorBuffer(progs[0].input_buffer(t), tensor.dtype, tensor.shape, weakref.ref(self), self._generation)

    def set_input_buffer(self, name: str, buffer: Any) -> None:
        """Read input `name` from a GPU buffer of this runner's device: a wgpu.GPUBuffer (STORAGE usage, BHWC
        float32; an int32 input's buffer holds its values as exact f32) or a TensorBuffer (another runner's or
        interpreter's output_buffer, or this runner's own: then each call reads the previous call's value, copied
        on the GPU before the call overwrites it). None: back to host values. The binding lasts until a call gives
        the input a host value or the runner compiles again."""
        t, progs = self._gpu_input(name)
        if buffer is None:
            self.bind_input(t, None)
            return
        tensor = self._graph.tensors[t]
        buffer = checked_input_buffer(buffer, tensor, f"input {name!r}", self._compiled.gpu.device)
        import wgpu

        own = any(buffer is b for p in progs for b in p.raw_out.values())
        if own and not buffer.usage & wgpu.BufferUsage.COPY_SRC:
            raise ValueError("an output buffer fed back to an input needs COPY_SRC usage")
        self.bind_input(t, buffer)

    def bind_input(self, t: int, buffer: Any | None) -> None:
        """Read input tensor t from a wgpu buffer (checked by the caller) from now on; None: upload host values."""
        for prog in self._compiled.gpu_programs:
            if t in prog.inputs:
                prog.bind_input(t, buffer)
        (self._bound.add if buffer is not None else self._bound.discard)(t)

    def check_indices(self, values: dict[int, np.ndarray]) -> None:
        """LiteRT's error for a host-fed index (token id, position) out of bounds, before anything is uploaded."""
        if self._index_checks:
            self._index_checks.check(values, self._names)

    @property
    def graph(self) -> Graph:
        """The signature's graph with the shapes of the last compilation (the declared ones before it)."""
        return self._graph

    @property
    def compiled_graph(self) -> CompiledGraph | None:
        """The last compilation, None before the first (`compiled` compiles)."""
        return self._compiled

    def issued(self, generation: int) -> bool:
        """Whether GPU buffers handed out in `generation` (TensorBuffer.generation) are still valid: compiled, and
        not compiled again since."""
        return self._generation == generation and self._compiled is not None

    def _name(self, name: str, names: dict[str, int], role: str) -> int:
        if name not in names:
            raise ValueError(f"{name!r} is not an {role} of signature {self._sig.key!r}; {role}s: {sorted(names)}")
        return names[name]

    def _gpu_input(self, name: str) -> tuple[int, list[Any]]:
        """Input `name`'s tensor and the GPU programs reading it; ValueError when the host must provide it."""
        t = self._name(name, self._sig.inputs, "input")
        tensor = self._graph.tensors[t]
        return t, gpu_readers(self.compiled, t, tensor, f"input {name!r} ({tensor.dtype})")

    @property
    def compiled(self) -> CompiledGraph:
        """The signature's compiled graph (plan, GPU programs), compiled at its declared input shapes unless a call
        compiled it already (inspect --signature reports it)."""
        if self._compiled is None:
            self.compile_for({t: tuple(self._base.tensors[t].shape) for t in self._sig.inputs.values()})
        return self._compiled

    @property
    def shape_cache(self) -> dict[str, int]:
        return self._shape_cache.report()

    @property
    def subgraph_index(self) -> int:
        """The model subgraph this signature runs."""
        return self._sig.subgraph


def _type_name(dtype: np.dtype) -> str:
    from ..model.ir import DTYPE_TO_TYPE

    return _TYPE_NAMES.get(DTYPE_TO_TYPE.get(np.dtype(dtype), -1), str(dtype).upper())
