"""LiteRT's TensorBuffer, stored in a GPU buffer: the one buffer type of gpuengine.

A TensorBuffer holds a tensor's bytes (its dtype, row-major; BHWC for 4-D) in a wgpu.GPUBuffer. `write` / `read`
exchange host memory as LiteRT's do; a CompiledModel binds a float32 buffer as a model input where the kernels
read it (no copy), so one model's output buffer passed as another's input stays on the GPU. The Interpreter's
`output_buffer` / `input_buffer` hand out the same class over its own buffers. `.buffer` is the wgpu buffer for
users who write their own shaders; it still unpacks as `(buffer, dtype)` as the older record did.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

# The dtypes LiteRT's TensorBuffer reads and writes (ml_dtypes' bfloat16 / float8 are LiteRT-only: the GPU holds
# floats as f32), by the name its get_tensor_details() gives.
SUPPORTED_DTYPES = {np.dtype(t): np.dtype(t).name for t in (np.float32, np.float16, np.int32, np.int8, np.uint8,
                                                            np.bool_)}
HOST_MEMORY = 1  # LiteRT's kLiteRtTensorBufferTypeHostMemory: what write() / read() exchange


def normalized_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype for a dtype argument, or LiteRT's ValueError for one it does not support."""
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as exc:
        raise ValueError(f"Unsupported dtype: {dtype}") from exc
    if np_dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"Unsupported dtype: {dtype}")
    return np_dtype


def host_array(data_array: Any) -> np.ndarray:
    """A NumPy array of a supported dtype, or LiteRT's ValueError."""
    if not isinstance(data_array, np.ndarray):
        raise ValueError("data_array must be a NumPy array")
    normalized_dtype(data_array.dtype)
    return data_array


def gpu_bytes(nbytes: int) -> int:
    """The size of the GPU buffer for nbytes: whole 16-byte words (what a kernel binding of the tensor spans)."""
    return max(16, -(-nbytes // 16) * 16)


class TensorBuffer:
    """A tensor in a GPU buffer, with LiteRT's TensorBuffer API (write, read, get_tensor_details, destroy).

    `buffer`: the wgpu.GPUBuffer (STORAGE usage) holding the tensor as `dtype`, row-major; `shape`: its shape.
    Buffers an Interpreter or SignatureRunner hands out (output_buffer / input_buffer) are its own and valid until
    it compiles again; those of a CompiledModel or create_from_host_memory are the caller's.
    """

    def __init__(self, buffer: Any, dtype: Any, shape: tuple[int, ...], owner: Any = None,
                 generation: int = 0) -> None:
        """owner: a weak reference to the Interpreter / SignatureRunner whose buffer this is (None: the caller's
        own); generation: the owner's compilation it belongs to."""
        self._gpu = buffer
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.owner, self.generation = owner, generation
        self._host: np.ndarray | None = None  # the bytes as last written from or read to the host, while valid
        self._pending: list[TensorBuffer] | None = None  # outputs of one run: read back together, in one map
        self._destroyed = False
        self.host_memory = False  # made by create_from_host_memory: a model of another device reads it via the host

    # -- LiteRT's API ------------------------------------------------------------------------------------------
    @classmethod
    def create_from_host_memory(cls, data_array: np.ndarray, device: Any = None) -> TensorBuffer:
        """A TensorBuffer holding a copy of `data_array` on the GPU (LiteRT references the host memory; here the
        storage is a GPU buffer, so later changes to the array are not seen). device: the wgpu.GPUDevice (default:
        the one models use unless given another); a model reads it as an input of the same element count and dtype."""
        array = host_array(data_array)
        if not array.flags.c_contiguous:
            raise ValueError("data_array must be C-contiguous for zero-copy host-memory binding")
        if device is None:
            from ..runtime.device import get_device

            device = get_device().device  # the one an Interpreter or CompiledModel uses by default
        buffer = cls.allocate(device, array.dtype, (array.size,))
        buffer.host_memory = True
        buffer.write(array)
        return buffer

    @classmethod
    def allocate(cls, device: Any, dtype: Any, shape: tuple[int, ...]) -> TensorBuffer:
        """A new zeroed TensorBuffer of this dtype and shape on `device`, owned by the caller."""
        import wgpu

        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        return cls(device.create_buffer(size=gpu_bytes(nbytes), usage=usage), dtype, shape)

    def write(self, data_array: np.ndarray) -> None:
        """Write the array's bytes at the start of the buffer (any supported dtype, as LiteRT: the bytes are
        copied, not converted); RuntimeError when they do not fit."""
        array = np.ascontiguousarray(host_array(data_array)).reshape(-1)
        self._live("WriteTensorBuffer")
        data = array.view(np.uint8)
        if data.size > self.nbytes:
            raise RuntimeError("WriteTensorBuffer: source buffer is larger than the tensor buffer")
        if data.size % 4:  # wgpu writes whole 4-byte words: keep the tensor's bytes after the array as they are
            whole = -(-data.size // 4) * 4
            kept = self._bytes()[data.size:whole] if data.size < self.nbytes else data[:0]
            data = np.concatenate([data, kept, np.zeros(whole - data.size - kept.size, np.uint8)])
        if data.size:
            self._gpu._device.queue.write_buffer(self._gpu, 0, data)
        host = self._host
        data = data[:self.nbytes]
        if data.size >= self.nbytes:
            self._host = data[:self.nbytes].copy()
        elif host is not None:
            host[:data.size] = data
        self._pending = None

    def read(self, num_elements: int, output_dtype: Any) -> np.ndarray:
        """The first num_elements of the buffer as output_dtype (its bytes reinterpreted, as LiteRT does);
        RuntimeError when that is more than the buffer holds."""
        np_dtype = normalized_dtype(output_dtype)
        result = np.empty(num_elements, dtype=np_dtype)  # ValueError for a negative count, as LiteRT
        self._live("ReadTensorToBuffer")
        if result.nbytes > self.nbytes:
            raise RuntimeError("ReadTensorToBuffer: destination buffer is larger than the tensor buffer")
        result.view(np.uint8)[:] = self._bytes()[:result.nbytes]
        return result

    def get_tensor_details(self) -> dict[str, Any]:
        """{'dtype': name, 'shape': list}, as LiteRT gives them."""
        self._live("GetTensorDetails")
        return {"dtype": SUPPORTED_DTYPES.get(self.dtype, self.dtype.name), "shape": list(self.shape)}

    def destroy(self) -> None:
        """Let go of the GPU buffer; the TensorBuffer cannot be used afterwards. The memory is freed once nothing
        uses it (not destroyed at once: a model's recorded commands may still bind it, and wgpu-native aborts the
        process on a submit that reads a destroyed buffer)."""
        self._destroyed, self._host, self._pending, self._gpu = True, None, None, None

    @property
    def capsule(self) -> Any:
        """The native handle (here the wgpu.GPUBuffer); ValueError once destroyed, as LiteRT's."""
        if self._destroyed:
            raise ValueError("TensorBuffer has been destroyed")
        return self._gpu  # not .buffer: a run passing the buffer keeps its host copy

    # -- the GPU side ------------------------------------------------------------------------------------------
    @property
    def buffer(self) -> Any:
        """The wgpu.GPUBuffer. Asking for it forgets the host copy of the contents: the caller may write it on the
        GPU, so the next read() or host-fed run reads the GPU buffer back."""
        if self._destroyed:
            raise ValueError("TensorBuffer has been destroyed")
        self._host = None
        self._pending = None
        return self._gpu

    @property
    def device(self) -> Any:
        """The wgpu.GPUDevice the buffer is on (None once destroyed)."""
        return self._gpu._device if self._gpu is not None else None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def destroyed(self) -> bool:
        return self._destroyed

    def __iter__(self) -> Any:
        return iter((self.buffer, self.dtype))

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else f"{self._gpu.size} bytes"
        return f"TensorBuffer({self.shape} {self.dtype.name}, {state})"

    def _live(self, what: str) -> None:
        if self._destroyed:
            raise RuntimeError(f"{what}: invalid capsule (the TensorBuffer has been destroyed)")
        if self.owner is not None:
            owner = self.owner()
            if owner is None or not owner.issued(self.generation):
                raise RuntimeError(f"{what}: this buffer came from an interpreter or runner that has compiled again "
                                   "or was deleted since (its buffers are valid until then); ask for it again")

    def written_on_gpu(self, group: list[TensorBuffer] | None = None) -> None:
        """A model wrote this buffer on the GPU: the host copy is stale. group: the buffers that run wrote, read
        back together by the first read() of any of them (one staging buffer mapped for all)."""
        self._host = None
        self._pending = group

    def set_host(self, data: np.ndarray) -> None:
        """A model computed this buffer's contents on the host: write them and keep them as the host copy."""
        self.write(np.ascontiguousarray(data, dtype=self.dtype))

    @property
    def stale(self) -> bool:
        """No host copy of the contents (written on the GPU since): a read copies them back."""
        return self._host is None

    def received(self, data: np.ndarray) -> None:
        """read_back copied the contents to the host: keep them as the host copy."""
        self._host = data
        self._pending = None

    def host_value(self) -> np.ndarray:
        """The contents as an array of this buffer's dtype and shape (from the host copy, else read back)."""
        return self._bytes()[:self.nbytes].view(self.dtype).reshape(self.shape)

    def _bytes(self) -> np.ndarray:
        """The buffer's bytes: the host copy, else read back (with the other buffers its run wrote, in one map)."""
        if self._host is None or self.owner is not None:  # an interpreter's own buffer changes at each invoke
            read_back([b for b in (self._pending or []) if not b.destroyed and b.stale] or [self])
        return self._host


# Staging buffers reused by read_back, by (device, size): creating one per read costs as much as the copy.
_STAGING: OrderedDict[tuple[int, int], tuple[Any, Any]] = OrderedDict()
_STAGING_KEPT = 8
_staging_lock = threading.Lock()


def read_back(buffers: list[TensorBuffer]) -> None:
    """Copy the buffers (all on one device) to one staging buffer, map it once, and keep each one's bytes."""
    import wgpu

    if any(b.device is not buffers[0].device for b in buffers):
        for b in buffers:
            read_back([b])
        return
    device = buffers[0].device
    offsets, total = [], 0
    for b in buffers:
        offsets.append(total)
        total += -(-b.capsule.size // 256) * 256
    with _staging_lock:  # one reader of a staging buffer at a time
        key = (id(device), total)
        kept = _STAGING.pop(key, None)
        staging = kept[1] if kept is not None and kept[0] is device else device.create_buffer(
            size=total, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        _STAGING[key] = (device, staging)
        while len(_STAGING) > _STAGING_KEPT:
            _STAGING.popitem(last=False)
        encoder = device.create_command_encoder()
        for b, offset in zip(buffers, offsets):
            encoder.copy_buffer_to_buffer(b.capsule, 0, staging, offset, b.capsule.size)
        device.queue.submit([encoder.finish()])
        staging.map_async("READ_NOSYNC").sync_wait()
        try:
            data = np.frombuffer(staging.read_mapped(copy=False), np.uint8)
            for b, offset in zip(buffers, offsets):
                b.received(data[offset:offset + b.nbytes].copy())
        finally:
            staging.unmap()
