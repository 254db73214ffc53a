"""A dispatch outside any compiled graph that a caller records after a program's invoke, in the same queue
submission (GpuProgram.submit(after=...)): the language-model layer's next-token sampler reading a decode step's
logits buffer. The kernel module gives the WGSL (lowering/kernels/sampler.py); the runtime compiles it through the
device's pipeline cache (one pipeline per WGSL text and device) and owns the buffers it adds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import UnsupportedOpError
from ..lowering.device_fit import source_violations
from .device import GpuDevice


class AddedDispatch:
    """One compiled dispatch bound to `buffers` (binding i = buffers[i], the WGSL's order); `command(...)`
    records it, with copies after it, into a command buffer for submit(after=...)."""

    def __init__(self, gpu: GpuDevice, source: str, buffers: list[Any], groups: tuple[int, int, int] = (1, 1, 1),
                 ) -> None:
        self.gpu, self.groups = gpu, groups
        problems = source_violations(source, gpu.device_limits, "an added dispatch")
        if len(buffers) > gpu.device_limits.storage_buffers:
            problems.append(f"an added dispatch binds {len(buffers)} storage buffers, more than the device's "
                            f"{gpu.device_limits.storage_buffers}")
        if problems:
            raise UnsupportedOpError(f"{problems[0]} ({gpu.describe()})")
        dev = gpu.device
        pipeline = gpu.pipelines.get(source)
        if pipeline is None:
            module = dev.create_shader_module(code=source)
            pipeline = gpu.pipelines[source] = dev.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"})
        self.pipeline = pipeline
        entries = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                   for i, b in enumerate(buffers)]
        self.bind_group = dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)

    def record(self, encoder: Any) -> None:
        """Append the dispatch to `encoder` in a compute pass of its own."""
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, self.bind_group)
        compute.dispatch_workgroups(*self.groups)
        compute.end()

    def command(self, copies: Sequence[tuple[Any, int, Any, int, int]] = ()) -> Any:
        """A command buffer: the dispatch, then each copy (source, offset, destination, offset, bytes)."""
        encoder = self.gpu.device.create_command_encoder()
        self.record(encoder)
        for source, source_offset, destination, destination_offset, size in copies:
            encoder.copy_buffer_to_buffer(source, source_offset, destination, destination_offset, size)
        return encoder.finish()


def state_buffer(gpu: GpuDevice, size: int) -> Any:
    """A storage buffer an added dispatch keeps state in, written by the host and copied from on the GPU."""
    import wgpu

    return gpu.device.create_buffer(size=size, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                                    | wgpu.BufferUsage.COPY_SRC)


def readback_buffer(gpu: GpuDevice, size: int) -> Any:
    """A small host-mappable buffer an added dispatch's results are copied into (read with `read_words`)."""
    import wgpu

    return gpu.device.create_buffer(size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)


def read_words(staging: Any, count: int = 1, gpu: GpuDevice | None = None) -> np.ndarray:
    """The first `count` u32 words of a readback buffer, blocking until the GPU has written them; `gpu`: its
    device, polled in this thread first (GpuDevice.poll: a copy already done is read without waking wgpu's poll
    thread)."""
    promise = staging.map_async("READ_NOSYNC")
    if gpu is not None:
        gpu.poll()
    promise.sync_wait()
    try:
        return np.frombuffer(staging.read_mapped(copy=False), np.uint32, count=count).copy()
    finally:
        staging.unmap()


def wait_unread(staging: Any) -> None:
    """Wait for a readback buffer's copy without reading it (steps past a stop token)."""
    staging.map_async("READ_NOSYNC").sync_wait()
    staging.unmap()

