"""A drop-in for ai_edge_litert.compiled_model.CompiledModel that runs the model on the GPU through WebGPU.

Swap `from ai_edge_litert.compiled_model import CompiledModel` (and `.tensor_buffer` / `.hardware_accelerator`)
for `from gpuengine import CompiledModel, TensorBuffer, HardwareAccelerator`. Each signature runs through the
SignatureRunner machinery (a model without signatures gets LiteRT's '<placeholder signature>'); its TensorBuffers
live in GPU buffers: a float32 input buffer is bound where the kernels read it (no upload, no copy), outputs are
copied into the output buffers on the GPU, and nothing comes back to the host until a buffer is read.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelError
from ..model.ir import SignatureDef, Tensor
from ..runtime.graph import CompiledGraph
from .hardware_accelerator import HardwareAccelerator
from .interpreter import Interpreter, SignatureRunner, checked_input_buffer, gpu_readers
from .tensor_buffer import HOST_MEMORY, TensorBuffer

PLACEHOLDER_SIGNATURE = "<placeholder signature>"  # LiteRT's key for a model without signature defs


class ModelLoadError(ModelError, RuntimeError):
    """The model could not be read: a ModelError, and the RuntimeError LiteRT's CompiledModel raises."""


@dataclass
class _Signature:
    """One signature: its runner, the input shapes asked for (resize_input_tensor) and what is bound."""

    key: str
    sig: SignatureDef
    runner: SignatureRunner
    shapes: dict[int, tuple[int, ...]]
    compiled: CompiledGraph | None = None  # the compilation `bound` and `gpu_inputs` belong to
    bound: dict[int, Any] = field(default_factory=dict)  # input tensor -> the wgpu buffer its kernels read
    gpu_inputs: set[int] = field(default_factory=set)  # inputs a GPU buffer can be bound to
    rebinds: dict[int, int] = field(default_factory=dict)  # input -> times another buffer replaced the bound one
    copied: set[int] = field(default_factory=set)  # inputs whose buffer changes run to run: copied on the GPU
    last: dict[str, TensorBuffer] = field(default_factory=dict)  # run_by_name: inputs left out keep these

    @property
    def inputs(self) -> list[str]:
        return list(self.sig.inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self.sig.outputs)


def _accelerators(hardware_accel: Any, options: Any) -> int:
    """The accelerator bits asked for (LiteRT's rule: options or hardware_accel, not both); None: GPU."""
    if options is not None:
        if hardware_accel is not None:
            raise ValueError("Pass either options or hardware_accel, not both.")
        hardware_accel = getattr(options, "hardware_accelerators", None)
    if hardware_accel is None:
        return int(HardwareAccelerator.GPU)  # LiteRT defaults to CPU; gpuengine is the GPU
    return int(hardware_accel)


def _litert_cpu(factory: str, source: Any, hardware_accel: Any, environment: Any, options: Any) -> Any:
    """hardware_accel=CPU: LiteRT's own CompiledModel (its TensorBuffers are LiteRT's)."""
    try:
        from ai_edge_litert.compiled_model import CompiledModel as LiteRtCompiledModel
    except ImportError as e:
        raise RuntimeError("hardware_accel=CPU runs on LiteRT's CompiledModel: install ai-edge-litert "
                           "(pip install gpuengine[litert]) or ask for HardwareAccelerator.GPU") from e
    warnings.warn("gpuengine.CompiledModel with hardware_accel=CPU runs on LiteRT's CPU CompiledModel; its "
                  "TensorBuffers are ai_edge_litert's, not gpuengine's", UserWarning, stacklevel=3)
    return getattr(LiteRtCompiledModel, factory)(source, hardware_accel=hardware_accel, environment=environment,
                                                 options=options)


class CompiledModel:
    """LiteRT's CompiledModel on gpuengine: signatures run on the GPU, inputs and outputs are TensorBuffers.

    Create with `from_file` / `from_buffer`; engine options (adapter, precision, device, memory_strategy, ...)
    are keyword arguments passed on to the Interpreter.
    """

    def __init__(self, interpreter: Interpreter, environment: Any = None) -> None:
        self._interpreter: Interpreter | None = interpreter
        self._environment = environment
        self._gpu: Any = None  # the GpuDevice of _device()
        self._lock = threading.Lock()
        model = interpreter.parsed_model
        sigs = list(model.signatures) or [SignatureDef(
            key=PLACEHOLDER_SIGNATURE, subgraph=0,
            inputs={model.main.tensors[t].name: t for t in model.main.inputs},
            outputs={model.main.tensors[t].name: t for t in model.main.outputs})]
        self._signatures = []
        for sig in sigs:
            graph = model.subgraphs[sig.subgraph]
            sig = SignatureDef(key=sig.key, subgraph=sig.subgraph, inputs=_in_order(sig.inputs, graph.inputs),
                               outputs=_in_order(sig.outputs, graph.outputs))
            self._signatures.append(_Signature(sig.key, sig, SignatureRunner(interpreter, sig),
                                               {t: tuple(graph.tensors[t].shape) for t in sig.inputs.values()}))

    # -- creation ---------------------------------------------------------------------------------------------
    @classmethod
    def from_file(cls, model_path: str | os.PathLike, hardware_accel: Any = None, environment: Any = None,
                  options: Any = None, **engine_options: Any) -> CompiledModel:
        """Load and prepare a .tflite file. hardware_accel: GPU (the default here; LiteRT's is CPU) runs on
        gpuengine; CPU alone returns LiteRT's CompiledModel; environment is accepted and kept."""
        return cls._create("from_file", model_path, hardware_accel, environment, options, engine_options)

    @classmethod
    def from_buffer(cls, model_data: bytes, hardware_accel: Any = None, environment: Any = None,
                    options: Any = None, **engine_options: Any) -> CompiledModel:
        """As from_file, from the model's bytes."""
        return cls._create("from_buffer", model_data, hardware_accel, environment, options, engine_options)

    @classmethod
    def _create(cls, factory: str, source: Any, hardware_accel: Any, environment: Any, options: Any,
                engine_options: dict[str, Any]) -> Any:
        accel = _accelerators(hardware_accel, options)
        if not accel & HardwareAccelerator.GPU:
            if accel & HardwareAccelerator.CPU:
                return _litert_cpu(factory, source, hardware_accel, environment, options)
            raise RuntimeError(f"hardware_accel={HardwareAccelerator(accel)!r}: gpuengine runs models on the GPU "
                               "(HardwareAccelerator.GPU), and on LiteRT's CPU kernels (CPU); there is no NPU")
        what = "file" if factory == "from_file" else "buffer"
        try:
            if factory == "from_file":
                interpreter = Interpreter(model_path=source, **engine_options)
            else:
                interpreter = Interpreter(model_content=source, **engine_options)
        except ModelError as e:
            raise ModelLoadError(f"Failed to load model from {what}: {e}") from e
        return cls(interpreter, environment)

    def __enter__(self) -> CompiledModel:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.close()

    def close(self) -> None:
        """Release the model; using it afterwards raises AttributeError, as LiteRT's does."""
        self._interpreter = None

    @property
    def environment(self) -> Any:
        return self._environment

    # -- signatures ---------------------------------------------------------------------------------------------
    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        """{key: {'inputs': names, 'outputs': names}} in the model's order (LiteRT's CompiledModel keeps it)."""
        self._live()
        return {s.key: {"inputs": s.inputs, "outputs": s.outputs} for s in self._signatures}

    def get_signature_by_index(self, index: int) -> dict[str, Any]:
        s = self._signature(index)
        return {"key": s.key, "inputs": s.inputs, "outputs": s.outputs}

    def get_num_signatures(self) -> int:
        self._live()
        return len(self._signatures)

    def get_signature_index(self, key: str) -> int:
        """The signature's index, -1 when there is none of that name."""
        self._live()
        return next((k for k, s in enumerate(self._signatures) if s.key == key), -1)

    def get_input_tensor_details(self, signature_key: str) -> dict[str, dict[str, Any]]:
        """{input name: {'name', 'index', 'dtype', 'shape'}} with the shapes as resized."""
        s = self._by_key(signature_key, "Signature not found")
        return {n: self._details(s, t, s.shapes[t]) for n, t in s.sig.inputs.items()}

    def get_output_tensor_details(self, signature_key: str) -> dict[str, dict[str, Any]]:
        s = self._by_key(signature_key, "Signature not found")
        return {n: self._details(s, t, self._output_shape(s, t)) for n, t in s.sig.outputs.items()}

    def get_input_buffer_requirements(self, input_index: int, signature_index: int = 0) -> dict[str, Any]:
        s = self._signature(signature_index)
        t = self._position(s.sig.inputs, input_index, "Input")
        return self._requirements(s, t, s.shapes[t])

    def get_output_buffer_requirements(self, output_index: int, signature_index: int = 0) -> dict[str, Any]:
        s = self._signature(signature_index)
        t = self._position(s.sig.outputs, output_index, "Output")
        return self._requirements(s, t, self._output_shape(s, t))

    def is_fully_accelerated(self) -> bool:
        """True when every op of every signature runs on the GPU (compiles the signatures not compiled yet)."""
        self._live()
        return all(p.device != "cpu" for s in self._signatures for p in self._compiled(s).plan.partitions)

    # -- buffers ----------------------------------------------------------------------------------------------
    def create_input_buffers(self, signature_index: int) -> list[TensorBuffer]:
        """A new zeroed GPU TensorBuffer for each input of the signature, in its order."""
        s = self._signature(signature_index)
        return [self._new_buffer(s, t, s.shapes[t]) for t in s.sig.inputs.values()]

    def create_output_buffers(self, signature_index: int) -> list[TensorBuffer]:
        s = self._signature(signature_index)
        return [self._new_buffer(s, t, self._output_shape(s, t)) for t in s.sig.outputs.values()]

    def create_input_buffer_by_name(self, signature_key: str, input_name: str) -> TensorBuffer:
        s = self._by_key(signature_key, "Signature not found")
        if input_name not in s.sig.inputs:
            raise RuntimeError(f"Input tensor not found: {input_name}")
        t = s.sig.inputs[input_name]
        return self._new_buffer(s, t, s.shapes[t])

    def create_output_buffer_by_name(self, signature_key: str, output_name: str) -> TensorBuffer:
        s = self._by_key(signature_key, "Signature not found")
        if output_name not in s.sig.outputs:
            raise RuntimeError(f"Output tensor not found: {output_name}")
        t = s.sig.outputs[output_name]
        return self._new_buffer(s, t, self._output_shape(s, t))

    # -- shapes -----------------------------------------------------------------------------------------------
    def resize_input_tensor(self, input_index: int, dims: Sequence[int], signature_index: int = 0,
                            strict: bool = True) -> None:
        """Give an input a new shape (the next run compiles for it, or takes what was compiled for it before).
        strict: only dimensions the model declares unknown (-1) may change, as LiteRT."""
        s = self._signature(signature_index)
        t = self._position(s.sig.inputs, input_index, "Input")
        new = tuple(int(d) for d in dims)
        tensor = self._base(s).tensors[t]
        declared = tuple(tensor.shape_signature) if tensor.shape_signature is not None else tuple(tensor.shape)
        if any(d < 0 for d in new):
            raise RuntimeError(f"New shape {list(new)} has a negative dimension.")
        if strict and new != s.shapes[t] and (len(new) != len(declared) or any(
                d != -1 and d != n for d, n in zip(declared, new))):
            raise RuntimeError("New shape is not compatible with current shape.")
        s.shapes[t] = new

    def resize_input_tensor_by_name(self, signature_key: str, input_name: str, dims: Sequence[int],
                                    strict: bool = True) -> None:
        signature_index = self.get_signature_index(signature_key)
        if signature_index < 0:
            raise ValueError(f"Unknown signature: {signature_key}")
        input_names = self._signatures[signature_index].inputs
        if input_name not in input_names:
            raise ValueError(f"Unknown input '{input_name}' for signature '{signature_key}'")
        self.resize_input_tensor(input_names.index(input_name), dims, signature_index, strict)

    # -- running ----------------------------------------------------------------------------------------------
    def run_by_index(self, signature_index: int, input_buffers: list[TensorBuffer],
                     output_buffers: list[TensorBuffer]) -> None:
        """Run the signature: inputs read from input_buffers, outputs written to output_buffers (in the
        signature's order). Returns once the work is submitted; a read() waits for it."""
        for b in [*input_buffers, *output_buffers]:
            _capsule(b)
        s = self._signature(signature_index)
        if len(input_buffers) != len(s.sig.inputs):
            raise RuntimeError(f"Input buffer size mismatch: number of inputs:{len(s.sig.inputs)} vs "
                               f"buffers:{len(input_buffers)}")
        if len(output_buffers) != len(s.sig.outputs):
            raise RuntimeError(f"Output buffer size mismatch: number of outputs:{len(s.sig.outputs)} vs "
                               f"buffers:{len(output_buffers)}")
        self._run(s, list(input_buffers), list(output_buffers))

    def run_by_name(self, signature_key: str, input_map: dict[str, TensorBuffer],
                    output_map: dict[str, TensorBuffer]) -> None:
        """Run the signature with buffers by name. Inputs left out read the buffer given last time (zeros at
        first); every output needs a buffer. Names the signature does not have are ignored, as LiteRT."""
        for b in [*input_map.values(), *output_map.values()]:
            _capsule(b)
        s = self._by_key(signature_key, "Failed to get signature_index")
        if any(n not in output_map for n in s.outputs):
            raise RuntimeError("The given map is missing some output TensorBuffers")
        inputs = []
        for name, t in s.sig.inputs.items():
            buffer = input_map.get(name) or s.last.get(name)
            if buffer is None or buffer.destroyed:
                buffer = self._new_buffer(s, t, s.shapes[t])
            s.last[name] = buffer
            inputs.append(buffer)
        self._run(s, inputs, [output_map[n] for n in s.outputs])

    def _run(self, s: _Signature, inputs: list[TensorBuffer], outputs: list[TensorBuffer]) -> None:
        with self._lock:  # runs of one model from several threads take turns (bindings, recorded commands)
            self._run_locked(s, inputs, outputs)

    def _run_locked(self, s: _Signature, inputs: list[TensorBuffer], outputs: list[TensorBuffer]) -> None:
        self._auto_resize(s, inputs)
        compiled = self._compiled(s)
        runner = s.runner
        graph = compiled.graph
        device = self._device()
        program = compiled.sole_gpu_program
        values: dict[int, np.ndarray] = {}
        binds: dict[int, Any] = {}
        for (name, t), buffer in zip(s.sig.inputs.items(), inputs):
            tensor = graph.tensors[t]
            _check_fits(buffer, tensor, f"input {name!r}")
            if program is not None and t in s.gpu_inputs and buffer.device is device:
                try:
                    binds[t] = checked_input_buffer(buffer, tensor, f"input {name!r}", device)
                except ValueError as e:
                    raise RuntimeError(f"Failed to register input tensor buffer: {e}") from e
            elif buffer.device is not device and not buffer.host_memory:
                raise RuntimeError(f"Failed to register input tensor buffer {name!r}: the buffer belongs to another "
                                   "GPU device than this model's (create the models with one device=)")
            else:
                values[t] = buffer.host_value()
        out_tensors = []
        for (name, t), buffer in zip(s.sig.outputs.items(), outputs):
            tensor = graph.tensors[t]
            _check_fits(buffer, tensor, f"output {name!r}")
            on_gpu = program is not None and t in program.raw_out and tensor.dtype == np.float32
            if on_gpu and buffer.device is not device:
                raise RuntimeError(f"Failed to register output tensor buffer {name!r}: the buffer belongs to "
                                   "another GPU device than this model's")
            out_tensors.append((t, buffer, on_gpu))
        copies = self._bind_inputs(s, compiled, binds)
        runner.check_indices(values)
        if copies:  # inputs in copy mode: their buffers copied into the program's own, ahead of it in the queue
            program.copy_into_inputs(copies)
        if program is None:  # CPU partitions or host-driven control flow: host values cross between them
            results = compiled.run(values)
        else:
            host_outputs = frozenset(t for t, _, on_gpu in out_tensors if not on_gpu and t in program.raw_out)
            if host_outputs:  # integer / quantized outputs: the GPU holds their real values, the host converts
                program.set_readback(host_outputs)
                results = program.collect(program.submit(values, read=True))
            else:
                program.submit(values, read=False)
                results = {}
        written = [(t, buffer) for t, buffer, on_gpu in out_tensors if on_gpu]
        if written:
            program.copy_outputs([(t, buffer.capsule) for t, buffer in written])
            group = [buffer for _, buffer in written]
            for buffer in group:
                buffer.written_on_gpu(group)
        for t, buffer, on_gpu in out_tensors:
            if not on_gpu:  # computed on the host, a constant, or an input passed straight through
                for source in (results, compiled.constants, values):
                    if t in source:
                        buffer.set_host(source[t])
                        break
                else:
                    raise RuntimeError(f"output tensor {t} ({graph.tensors[t].name!r}) has no value: it passes an "
                                       "input through that was bound on the GPU; read that input's buffer")

    @staticmethod
    def _bind_inputs(s: _Signature, compiled: CompiledGraph, binds: dict[int, Any]) -> list[tuple[int, Any]]:
        """Bind each GPU-read input to its buffer, so the kernels read it where it is. Binding another buffer
        re-records the program's command buffers, so an input whose buffer keeps changing (a KV cache ping-ponging
        between two sets) goes to copy mode after the second change: its buffer is copied on the GPU into the
        program's own input buffer before each run. Returns those copies (input, wgpu buffer)."""
        runner = s.runner

        def resident(t: int, on: bool) -> None:
            for prog in compiled.gpu_programs:
                if t in prog.inputs:
                    prog.set_resident(t, on)

        for t in [t for t in s.bound if t not in binds]:  # a host value again: upload it
            runner.bind_input(t, None)
            del s.bound[t]
        for t in [t for t in s.copied if t not in binds]:
            resident(t, False)
            s.copied.discard(t)
        copies = []
        for t, gpu_buffer in binds.items():
            if t in s.copied:
                copies.append((t, gpu_buffer))
                continue
            if s.bound.get(t) is gpu_buffer:
                continue
            if t in s.bound:
                s.rebinds[t] = s.rebinds.get(t, 0) + 1
                if s.rebinds[t] >= 2:
                    runner.bind_input(t, None)
                    del s.bound[t]
                    resident(t, True)
                    s.copied.add(t)
                    copies.append((t, gpu_buffer))
                    continue
            runner.bind_input(t, gpu_buffer)
            s.bound[t] = gpu_buffer
        return copies

    def _auto_resize(self, s: _Signature, inputs: list[TensorBuffer]) -> None:
        """An input buffer of another shape that the model's dynamic (-1) dimensions allow resizes the input, as
        LiteRT's CompiledModel does when it registers such a buffer."""
        base = self._base(s)
        for t, buffer in zip(s.sig.inputs.values(), inputs):
            declared = base.tensors[t].shape_signature
            if buffer.shape != s.shapes[t] and declared is not None and len(declared) == len(buffer.shape) and all(
                    d == -1 or d == n for d, n in zip(declared, buffer.shape)):
                s.shapes[t] = buffer.shape

    # -- engine extras ------------------------------------------------------------------------------------------
    def signature_runner(self, signature: int | str = 0) -> SignatureRunner:
        """The SignatureRunner a signature runs on (its compiled graph, describe-like reports)."""
        s = self._signature(signature) if isinstance(signature, int) else self._by_key(signature, "Signature not "
                                                                                                   "found")
        self._compiled(s)
        return s.runner

    # -- helpers ------------------------------------------------------------------------------------------------
    def _live(self) -> Interpreter:
        if self._interpreter is None:
            raise AttributeError("this CompiledModel was closed (close() or the end of its 'with' block)")
        return self._interpreter

    def _device(self) -> Any:
        """The wgpu device the model runs on (the one its compiled graphs use), picked once while it lives."""
        from ..runtime.device import device_for

        options = self._live().engine_options
        if self._gpu is None or not self._gpu.alive():
            self._gpu = device_for(options)
        return self._gpu.device

    def _signature(self, index: Any) -> _Signature:
        self._live()
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not (
                0 <= index < len(self._signatures)):
            raise RuntimeError(f"Signature index {index!r} is out of range of signature keys "
                               f"({len(self._signatures)} signatures)")
        return self._signatures[int(index)]

    def _by_key(self, key: str, message: str) -> _Signature:
        index = self.get_signature_index(key)
        if index < 0:
            raise RuntimeError(f"{message}: {key}; signatures: {[s.key for s in self._signatures]}")
        return self._signatures[index]

    @staticmethod
    def _position(names: dict[str, int], index: Any, role: str) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(names):
            raise RuntimeError(f"{role} index {index!r} out of range ({len(names)} {role.lower()}s)")
        return list(names.values())[int(index)]

    def _base(self, s: _Signature) -> Any:
        return self._live().parsed_model.subgraphs[s.sig.subgraph]

    def _output_shape(self, s: _Signature, t: int) -> tuple[int, ...]:
        base = self._base(s)
        if all(tuple(base.tensors[i].shape) == shape for i, shape in s.shapes.items()):
            return tuple(base.tensors[t].shape)
        return tuple(self._compiled(s).graph.tensors[t].shape)  # resized: the shapes follow from compiling

    def _details(self, s: _Signature, t: int, shape: tuple[int, ...]) -> dict[str, Any]:
        tensor: Tensor = self._base(s).tensors[t]
        return {"name": tensor.name, "index": t, "dtype": np.dtype(tensor.dtype).name, "shape": list(shape)}

    def _requirements(self, s: _Signature, t: int, shape: tuple[int, ...]) -> dict[str, Any]:
        dtype = np.dtype(self._base(s).tensors[t].dtype)
        return {"buffer_size": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, "supported_types": [HOST_MEMORY]}

    def _new_buffer(self, s: _Signature, t: int, shape: tuple[int, ...]) -> TensorBuffer:
        return TensorBuffer.allocate(self._device(), self._base(s).tensors[t].dtype, shape)

    def _compiled(self, s: _Signature) -> CompiledGraph:
        """The signature's compiled graph for its current input shapes (compiled on first use or after a resize;
        the shape cache keeps the plans of shapes seen before)."""
        runner = s.runner
        compiled = runner.compiled_graph
        if compiled is None or (compiled.gpu is not None and compiled.gpu.lost) or any(
                tuple(runner.graph.tensors[t].shape) != shape for t, shape in s.shapes.items()):
            compiled = runner.compile_for(dict(s.shapes))
        if s.compiled is not compiled:  # a new compilation binds nothing yet
            s.compiled, s.bound, s.rebinds, s.copied = compiled, {}, {}, set()
            s.gpu_inputs = set()
            for t in s.sig.inputs.values():
                if compiled.graph.tensors[t].dtype != np.float32:
                    continue  # an int32 input's GPU buffer holds exact f32 values, a TensorBuffer int32 bytes: upload
                try:
                    gpu_readers(compiled, t, compiled.graph.tensors[t], "")
                    s.gpu_inputs.add(t)
                except ValueError:
                    pass
        return compiled


def _in_order(names: dict[str, int], tensors: list[int]) -> dict[str, int]:
    """A signature's names in the order of its subgraph's inputs or outputs (the order LiteRT's CompiledModel
    lists and indexes them in; the file keeps them sorted by name)."""
    position = {t: k for k, t in enumerate(tensors)}
    return dict(sorted(names.items(), key=lambda item: position.get(item[1], len(tensors))))


def _capsule(buffer: Any) -> Any:
    """LiteRT's first check of a run's buffers: a TensorBuffer (AttributeError) that is not destroyed (ValueError)."""
    if not isinstance(buffer, TensorBuffer):
        raise AttributeError(f"'{type(buffer).__name__}' object has no attribute 'capsule' (runs take TensorBuffers)")
    return buffer.capsule


def _check_fits(buffer: TensorBuffer, tensor: Tensor, what: str) -> None:
    """LiteRT's RuntimeError for a buffer that cannot hold the tensor (another dtype or element count)."""
    if buffer.owner is not None:
        owner = buffer.owner()
        if owner is None or not owner.issued(buffer.generation):
            raise RuntimeError(f"Failed to register tensor buffer for {what}: the buffer came from an interpreter "
                               "or runner that has compiled again or was deleted since; ask for it again")
    size = int(np.prod(tensor.shape, dtype=np.int64))
    if buffer.dtype != tensor.dtype or buffer.size != size:
        raise RuntimeError(f"Failed to register tensor buffer for {what}: it holds {buffer.size} "
                           f"{buffer.dtype.name}, the tensor is {list(tensor.shape)} {np.dtype(tensor.dtype).name}")
