"""Run a LASNet-style masked residual block spatially sparse on the GPU (lowering/kernels/lasnet.py), on buffers of
its own: the mask, the active-patch list and out = x over the inactive patches, the indirect count, then the block's
two convs dispatched *indirectly* (`dispatch_workgroups_indirect`), one workgroup per active patch, the count read by
the GPU: the host never learns the activation rate before the block runs. Buffers, pipelines and bind groups are
made once, at construction; a run writes x, submits one command buffer and maps out (and the count) back.

mode "all" runs the same kernels over every patch, "none" over no patch (lowering/kernels/lasnet.MODES). The
engine's own programs record the same dispatches inside their one command buffer (lowering/lasnet.py,
runtime/program.py); this runner times and checks the block as a unit (tests, tuning/sparse.py, `gpuengine
profile`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..lowering import codegen
from ..lowering.kernels import lasnet
from ..passes.lasnet_blocks import MaskedBlock
from .device import DEVICE_LOST, GpuDevice


class SparseBlockRunner:
    """One masked block at one execution patch size, with its own buffers (see the module docstring)."""

    def __init__(self, gpu: GpuDevice, block: MaskedBlock, patch: int, mode: str = "mask",
                 pixels: int = lasnet.MOST_PIXELS) -> None:
        import wgpu

        self.gpu, self.block, self.patch, self.mode = gpu, block, patch, mode
        dev = gpu.device
        h, w, c = block.shape
        geo = lasnet.geometry(block, patch)
        self.patches_total = geo["np"]
        self.active = 0  # active patches of the last run
        self.bytes = h * w * c * 4
        storage = wgpu.BufferUsage.STORAGE

        def buffer(size: int, usage: Any) -> Any:
            return dev.create_buffer(size=max(16, -(-size // 16) * 16), usage=usage)

        def constant(values: np.ndarray) -> Any:
            buf = buffer(values.nbytes, storage | wgpu.BufferUsage.COPY_DST)
            dev.queue.write_buffer(buf, 0, values)
            return buf

        self.x = buffer(self.bytes, storage | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)
        self.out = buffer(self.bytes, storage | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC)
        self.out_staging = buffer(self.bytes, wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self.args_staging = buffer(12, wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        mask, args, conv = lasnet.specs(block, patch, mode, layout="bhwc", pixels=pixels)
        scratch: dict[str, Any] = {}
        constants: dict[str, Any] = {}

        def of(b: Any) -> Any:
            if b.tensor is not None:
                return self.out if b.writable else self.x
            if b.data is not None:
                if b.name not in constants:
                    constants[b.name] = constant(np.ascontiguousarray(b.data))
                return constants[b.name]
            if b.scratch_key not in scratch:
                scratch[b.scratch_key] = buffer(b.scratch_bytes, storage | wgpu.BufferUsage.INDIRECT
                                                | wgpu.BufferUsage.COPY_SRC)
            return scratch[b.scratch_key]

        self.kernels = {name: (*self._bind(codegen.render(spec), [of(b) for b in codegen.bound(spec)]),
                               codegen.dispatch_size(spec)) for name, spec in zip(lasnet.KERNELS, (mask, args, conv))}
        self.args = scratch[conv.indirect]

    def _bind(self, source: str, buffers: list[Any]) -> tuple[Any, Any]:
        dev = self.gpu.device
        pipeline = self.gpu.pipelines.get(source)
        if pipeline is None:
            module = dev.create_shader_module(code=source)
            pipeline = self.gpu.pipelines[source] = dev.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"})
        entries = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                   for i, b in enumerate(buffers)]
        return pipeline, dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)

    def _command(self, read_out: bool) -> Any:
        encoder = self.gpu.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for kernel in lasnet.KERNELS:
            self._record(compute, kernel)
        compute.end()
        encoder.copy_buffer_to_buffer(self.args, 0, self.args_staging, 0, 12)
        if read_out:
            encoder.copy_buffer_to_buffer(self.out, 0, self.out_staging, 0, self.bytes)
        return encoder.finish()

    def _submit(self, read_out: bool) -> None:
        if not self.gpu.alive():
            raise RuntimeError(DEVICE_LOST)
        self.gpu.device.queue.submit([self._command(read_out)])
        self.args_staging.map_async("READ_NOSYNC").sync_wait()  # map-based wait for the GPU
        try:
            self.active = int(np.frombuffer(self.args_staging.read_mapped(copy=False), np.uint32, count=1)[0])
        finally:
            self.args_staging.unmap()

    def _record(self, compute: Any, kernel: str) -> None:
        pipeline, bind_group, groups = self.kernels[kernel]
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, bind_group)
        if kernel == "block":
            compute.dispatch_workgroups_indirect(self.args, 0)  # one workgroup per active patch
        else:
            compute.dispatch_workgroups(*groups)

    def span_ns(self, kernel: str, repeat: int = 1) -> float:
        """Wall-clock nanoseconds per dispatch of `kernel` (lowering/kernels/lasnet.KERNELS) recorded `repeat` times
        back to back in one pass, on the x last run (the block kernel over the patches its mask listed), submit to
        the map-based wait included: as runtime/timing.py spans other kernels, for the latency model's fit
        (tuning/sparse.py). After repeated mask dispatches one args dispatch clears the counter they advanced; after
        any, a whole pass (untimed) leaves the counter and the indirect count as a run does."""
        if kernel not in lasnet.KERNELS:
            raise ValueError(f"kernel {kernel!r} is not one of {lasnet.KERNELS}")
        encoder = self.gpu.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for _ in range(max(1, repeat)):
            self._record(compute, kernel)
        if kernel == "mask":
            self._record(compute, "args")
        compute.end()
        encoder.copy_buffer_to_buffer(self.args, 0, self.args_staging, 0, 12)
        start = time.perf_counter_ns()
        self.gpu.device.queue.submit([encoder.finish()])
        self.args_staging.map_async("READ_NOSYNC").sync_wait()
        self.args_staging.unmap()
        elapsed = (time.perf_counter_ns() - start) / max(1, repeat)
        self._submit(read_out=False)  # a whole pass again: the counter and the indirect count as one run leaves them
        return elapsed

    def run(self, x: np.ndarray) -> np.ndarray:
        """The block's output for x [1, H, W, C] float32."""
        h, w, c = self.block.shape
        value = np.ascontiguousarray(x, np.float32)
        if value.shape != (1, h, w, c):
            raise ValueError(f"x has shape {value.shape}; the block takes (1, {h}, {w}, {c})")
        self.gpu.device.queue.write_buffer(self.x, 0, value)
        self._submit(read_out=True)
        self.out_staging.map_async("READ_NOSYNC").sync_wait()
        try:
            return np.frombuffer(self.out_staging.read_mapped(copy=False), np.float32,
                                 count=h * w * c).reshape(1, h, w, c).copy()
        finally:
            self.out_staging.unmap()

    def time_ms(self, runs: int = 20) -> float:
        """Median wall-clock milliseconds of one GPU pass of the block on the x last run: submit to the map-based
        wait on the count, the command buffer recorded before the clock starts (as runtime/timing.py spans the
        engine's dispatches: what a software adapter without timestamps can measure)."""
        self._submit(read_out=False)
        times = []
        for _ in range(max(1, runs)):
            command = self._command(read_out=False)
            start = time.perf_counter()
            self.gpu.device.queue.submit([command])
            self.args_staging.map_async("READ_NOSYNC").sync_wait()
            times.append(time.perf_counter() - start)
            self.args_staging.unmap()
        return float(np.median(times) * 1e3)


__all__ = ["SparseBlockRunner"]
