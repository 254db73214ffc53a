"""Real-time pipelines: one device for many models, GPU-resident inputs and outputs, invokes in flight."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu
from builders import conv_model, cpu_partition_model

import gpuengine
from gpuengine import Interpreter


def _pair(device=None):
    a = Interpreter(model_content=conv_model(1, 3, 5), device=device)
    b = Interpreter(model_content=conv_model(2, 5, 4), device=device)
    a.allocate_tensors()
    b.allocate_tensors()
    return a, b


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32) for _ in range(n)]


def _sequential(frames: list[np.ndarray]) -> list[np.ndarray]:
    """The host path: a's output read back and set as b's input."""
    a, b = _pair()
    out = []
    for x in frames:
        a.set_tensor(a.get_input_details()[0]["index"], x)
        a.invoke()
        b.set_tensor(b.get_input_details()[0]["index"], a.get_tensor(a.get_output_details()[0]["index"]))
        b.invoke()
        out.append(b.get_tensor(b.get_output_details()[0]["index"]))
    return out


def test_one_device_for_many_models():
    dev = gpuengine.get_device()
    assert isinstance(dev, wgpu.GPUDevice) and gpuengine.get_device() is dev
    a, b = _pair(device=dev)
    assert a.compiled.gpu.device is dev and b.compiled.gpu is a.compiled.gpu
    with pytest.raises(ValueError, match="device must be a wgpu.GPUDevice"):
        Interpreter(model_content=conv_model(1, 3, 5), device="gpu0")


def test_chained_models_read_back_only_the_last(count_maps):
    """b reads a's output on the GPU: one submit each, one map per frame (b's), and the same results as the
    host path, bit for bit."""
    frames = _frames(4)
    expected = _sequential(frames)
    a, b = _pair(device=gpuengine.get_device())
    b.set_input_buffer(0, a.output_buffer(0))
    count_maps["maps"] = 0
    results = []
    for x in frames:
        a.invoke_async({a.get_input_details()[0]["index"]: x}, read_outputs=False)
        (out,) = b.invoke_async().result().values()
        results.append(out)
    assert count_maps["maps"] == len(frames)
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_invokes_in_flight_equal_sequential_invokes():
    data = conv_model(3, 3, 6, size=16)
    frames = [np.random.default_rng(k).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32) for k in range(7)]
    it = Interpreter(model_content=data, max_inflight=3)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    expected = []
    for x in frames:
        it.set_tensor(inp, x)
        it.invoke()
        expected.append(it.get_tensor(out))
    jobs = [it.invoke_async({inp: x}) for x in frames]  # more than max_inflight: the oldest are collected first
    assert all(job.done() for job in jobs[:4])  # collected to free their staging buffers
    for job, want in zip(jobs, expected):
        np.testing.assert_array_equal(job.result()[out], want)
        assert job.done()
    gpu_only = it.invoke_async({inp: frames[0]}, read_outputs=False)
    assert gpu_only.result() == {} and gpu_only.done()
    with pytest.raises(ValueError, match="max_inflight must be an integer >= 1"):
        Interpreter(model_content=data, max_inflight=0)
    with pytest.raises(ValueError, match="needs float32 of shape"):
        it.invoke_async({inp: frames[0][..., :2]})


def test_an_input_written_on_the_gpu():
    """input_buffer hands the input to the GPU: invokes stop uploading it; set_tensor takes it back."""
    it = Interpreter(model_content=conv_model(4, 3, 2))
    it.allocate_tensors()
    inp, out = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    x, y = _frames(2)
    it.set_tensor(inp, x)
    it.invoke()
    want_x = it.get_tensor(out)
    it.set_tensor(inp, y)
    it.invoke()
    want_y = it.get_tensor(out)
    buf, dtype = it.input_buffer(0)
    assert dtype == np.float32 and buf.size >= x.nbytes
    it.compiled.gpu.device.queue.write_buffer(buf, 0, x)
    it.invoke()  # the host still holds y, but the buffer (x) is what the kernels read
    np.testing.assert_array_equal(it.get_tensor(out), want_x)
    it.set_tensor(inp, y)
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(out), want_y)


def test_buffers_are_checked():
    a, b = _pair(device=gpuengine.get_device())
    stale = a.output_buffer(0)
    a.allocate_tensors()
    with pytest.raises(ValueError, match="re-allocated or deleted"):
        b.set_input_buffer(0, stale)
    dev = a.compiled.gpu.device
    with pytest.raises(ValueError, match="needs 1280 bytes, the buffer has 64"):
        b.set_input_buffer(0, dev.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE))
    with pytest.raises(ValueError, match="STORAGE usage"):
        b.set_input_buffer(0, dev.create_buffer(size=1280, usage=wgpu.BufferUsage.COPY_DST))
    other = dev.adapter.request_device_sync()
    with pytest.raises(ValueError, match="another GPU device"):
        b.set_input_buffer(0, other.create_buffer(size=1280, usage=wgpu.BufferUsage.STORAGE))
    with pytest.raises(ValueError, match="input position 3 out of range"):
        b.input_buffer(3)
    with pytest.raises(ValueError, match="needs a wgpu.GPUBuffer"):
        b.set_input_buffer(0, np.zeros(320, np.float32))


def test_models_with_cpu_partitions():
    """A CPU partition runs on the host in between, so invoke_async runs to the end at once; its outputs have no
    GPU buffer."""
    rng = np.random.default_rng(5)
    data, w = cpu_partition_model(rng)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    assert any(p.device == "cpu" for p in it.compiled.plan.partitions)
    value = rng.uniform(-1, 1, (1, 4, 4, 3)).astype(np.float32)
    it.set_tensor(it.get_input_details()[0]["index"], value)
    job = it.invoke_async()
    assert job.done()
    expected = np.cumsum(np.einsum("nhwc,oc->nhwo", value, w[:, 0, 0, :]), axis=3)
    np.testing.assert_allclose(job.result()[it.get_output_details()[0]["index"]], expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="not computed on the GPU"):
        it.output_buffer(0)
