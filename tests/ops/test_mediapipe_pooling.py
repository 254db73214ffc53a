"""MediaPipe MaxPoolingWithArgmax2D / MaxUnpooling2D against a numpy reference of MediaPipe's CPU kernels.

LiteRT's wheel has no MediaPipe ops, so the reference below re-states max_pool_argmax.cc and max_unpooling.cc.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from helpers import relative_error, run_gpuengine, tolerance
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

SAME, VALID = 1, 2
LOWEST = np.finfo(np.float32).min


def options(padding: int, stride: tuple[int, int], filt: tuple[int, int], act: int = 0) -> bytes:
    """TfLitePoolParams: padding, stride_w, stride_h, filter_w, filter_h, activation, computed padding."""
    return struct.pack("<10i", padding, stride[1], stride[0], filt[1], filt[0], act, 0, 0, 0, 0)


def compute_padding(stride: int, in_size: int, filt: int, out_size: int) -> int:
    return max(((out_size - 1) * stride + filt - in_size) // 2, 0)


def ref_argmax(x: np.ndarray, padding: int, stride, filt, act: int = 0) -> tuple[np.ndarray, np.ndarray]:
    b, h, w, c = x.shape
    (sh, sw), (fh, fw) = stride, filt
    oh = (h + sh - 1) // sh if padding == SAME else (h - fh + sh) // sh
    ow = (w + sw - 1) // sw if padding == SAME else (w - fw + sw) // sw
    ph, pw = compute_padding(sh, h, fh, oh), compute_padding(sw, w, fw, ow)
    lo, hi = {1: (0, None), 2: (-1, 1), 3: (0, 6)}.get(act, (None, None))
    out = np.zeros((b, oh, ow, c), np.float32)
    idx = np.zeros((b, oh, ow, c), np.float32)
    for n, y, xx, ch in np.ndindex(b, oh, ow, c):
        y0, x0 = y * sh - ph, xx * sw - pw
        best, by, bx = LOWEST, 0, 0
        for fy in range(max(0, -y0), min(fh, h - y0)):
            for fx in range(max(0, -x0), min(fw, w - x0)):
                v = x[n, y0 + fy, x0 + fx, ch]
                if v > best:
                    best, by, bx = v, fy, fx
        out[n, y, xx, ch] = np.clip(best, lo, hi) if (lo is not None or hi is not None) else best
        idx[n, y, xx, ch] = np.float32(by * fw + bx) + np.float32(0.1)
    return out, idx


def ref_unpool(values: np.ndarray, indices: np.ndarray, stride, filt) -> np.ndarray:
    b, h, w, c = values.shape
    (sh, sw), (fh, fw) = stride, filt
    oh, ow = h * fh, w * fw
    ph, pw = compute_padding(sh, oh, fh, h), compute_padding(sw, ow, fw, w)
    out = np.zeros((b, oh, ow, c), np.float32)
    for n, y, x, ch in np.ndindex(b, h, w, c):  # raster order: later writes win
        i = int(indices[n, y, x, ch])
        oy, ox = y * sh - ph + i // fw, x * sw - pw + i % fw
        if 0 <= oy < oh and 0 <= ox < ow:
            out[n, oy, ox, ch] = values[n, y, x, ch]
    return out


def pool_unpool_model(shape, padding, stride, filt, act=0) -> tuple[bytes, tuple[int, ...]]:
    x = np.zeros(shape, np.float32)
    pooled_shape = ref_argmax(x[:, :, :, :1], padding, stride, filt)[0].shape[:3] + (shape[3],)
    b, oh, ow, c = pooled_shape
    mb = ModelBuilder()
    xin = mb.input("x", shape)
    vin = mb.input("v", pooled_shape)
    pooled, idx = mb.op("MaxPoolingWithArgmax2D", [xin], [pooled_shape, pooled_shape],
                        custom_options=options(padding, stride, filt, act))
    out = mb.op("MaxUnpooling2D", [vin, idx], (b, oh * filt[0], ow * filt[1], c),
                custom_options=options(padding, stride, filt))
    mb.output(pooled, idx, out)
    return mb.build(), pooled_shape


def check(shape, padding, stride, filt, act=0, x=None, seed=0):
    model, pooled_shape = pool_unpool_model(shape, padding, stride, filt, act)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, shape).astype(np.float32) if x is None else x
    v = rng.uniform(-1, 1, pooled_shape).astype(np.float32)
    got, it = run_gpuengine(model, {0: x, 1: v})
    assert all(p.device == "gpu" for p in it.compiled.plan.partitions), it.compiled.plan.support
    pooled, idx = ref_argmax(x, padding, stride, filt, act)
    graph = read_model(model).main
    want = {graph.outputs[0]: pooled, graph.outputs[1]: idx,
            graph.outputs[2]: ref_unpool(v, idx, stride, filt)}
    for t, ref in want.items():
        assert relative_error(got[t], ref) <= tolerance(it, 1e-6), (t, got[t], ref)


@st.composite
def case(draw):
    padding = draw(st.sampled_from([SAME, VALID]))
    fh, fw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape = (draw(st.integers(1, 2)), draw(st.integers(fh, 9)), draw(st.integers(fw, 9)),
             draw(st.sampled_from([1, 3, 4, 5, 7])))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    return shape, padding, stride, (fh, fw), draw(st.sampled_from([0, 1, 2, 3, 4]))


@given(case())
def test_random(c):
    check(*c)


def test_mediapipe_2x2():
    """The configuration MediaPipe segmentation models use: 2x2 windows, stride 2."""
    check((1, 16, 12, 5), SAME, (2, 2), (2, 2))
    check((1, 15, 11, 3), VALID, (2, 2), (2, 2), act=3)


def test_ties_and_overlap():
    """Ties keep the first maximum; overlapping windows (stride < filter) unpool, the last writer wins."""
    x = np.random.default_rng(7).integers(0, 2, (1, 7, 6, 7)).astype(np.float32)
    check((1, 7, 6, 7), SAME, (1, 1), (3, 2), x=x)
    check((2, 8, 8, 3), VALID, (1, 2), (3, 3), x=np.zeros((2, 8, 8, 3), np.float32))


def test_unbounded_indices_are_rejected():
    mb = ModelBuilder()
    v = mb.input("v", (1, 4, 4, 3))
    i = mb.input("i", (1, 4, 4, 3))
    mb.output(mb.op("MaxUnpooling2D", [v, i], (1, 8, 8, 3), custom_options=options(SAME, (2, 2), (2, 2))))
    graph = read_model(mb.build()).main
    reason = registry.check(graph.ops[0], graph)
    assert reason and "MaxPoolingWithArgmax2D" in reason


@pytest.mark.parametrize("opts,needle", [
    (struct.pack("<6i", 0, 2, 2, 2, 2, 0), "padding"), (b"\0" * 8, "bytes"),
    (struct.pack("<6i", 1, 0, 2, 2, 2, 0), "positive"), (struct.pack("<6i", 1, 2, 2, 2, 2, 9), "activation")])
def test_bad_options_are_rejected(opts, needle):
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    outs = mb.op("MaxPoolingWithArgmax2D", [x], [(1, 2, 2, 3), (1, 2, 2, 3)], custom_options=opts)
    mb.output(*outs)
    graph = read_model(mb.build()).main
    reason = registry.check(graph.ops[0], graph)
    assert reason and needle in reason
