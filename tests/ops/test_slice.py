"""SLICE and STRIDED_SLICE against LiteRT.

Strided slices are drawn as numpy index expressions (slices with negative/omitted bounds and strides, ints,
None, Ellipsis); numpy gives the expected output shape, the TFLite begin/end/strides/masks encode them.
"""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, support_reason
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder

DIMS = [1, 2, 3, 5, 7, 8]


def slice_model(shape: tuple[int, ...], begin: list[int], size: list[int], dtype=np.int32) -> bytes:
    out = tuple(d - b if s == -1 else s for d, b, s in zip(shape, begin, size))
    mb = ModelBuilder()
    x = mb.input("x", shape)
    mb.output(mb.op("SLICE", [x, mb.const("b", np.array(begin, dtype)), mb.const("s", np.array(size, dtype))],
                    out))
    return mb.build()


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=4), st.data())
def test_slice(shape, data):
    begin = [data.draw(st.integers(0, d - 1)) for d in shape]
    size = [data.draw(st.sampled_from([-1, data.draw(st.integers(1, d - b))])) for d, b in zip(shape, begin)]
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    assert_matches_litert(slice_model(tuple(shape), begin, size, dtype))


def strided_model(shape: tuple[int, ...], spec: tuple, junk: int = 0, offset: bool = False) -> bytes:
    """Encode a numpy index tuple as STRIDED_SLICE inputs and masks; `junk` fills ignored begin/end slots."""
    begin, end, strides = [], [], []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}
    for i, item in enumerate(spec):
        bit = 1 << i
        if item is Ellipsis:
            masks["ellipsis_mask"] |= bit
            begin.append(junk), end.append(junk), strides.append(1)
        elif item is None:
            masks["new_axis_mask"] |= bit
            begin.append(junk), end.append(junk), strides.append(1)
        elif isinstance(item, int):
            masks["shrink_axis_mask"] |= bit
            begin.append(item), end.append(item + 1 if item != -1 else junk), strides.append(1)
        else:
            if item.start is None:
                masks["begin_mask"] |= bit
            if item.stop is None:
                masks["end_mask"] |= bit
            begin.append(junk if item.start is None else item.start)
            stop = junk if item.stop is None else item.stop
            end.append(stop - (item.start or 0) if offset else stop)
            strides.append(item.step or 1)
    out = np.zeros(shape)[spec].shape
    mb = ModelBuilder()
    x = mb.input("x", shape)
    ins = [x] + [mb.const(n, np.array(v, np.int32)) for n, v in zip("bes", (begin, end, strides))]
    mb.output(mb.op("STRIDED_SLICE", ins, out, {**masks, "offset": True} if offset else masks))
    return mb.build()


@st.composite
def strided_case(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
    spec: list = []
    axis, ellipsis = 0, False
    for _ in range(draw(st.integers(1, rank + 1))):
        kind = draw(st.sampled_from(["slice", "slice", "slice", "int", "new", "ellipsis"]))
        if kind == "ellipsis" and not ellipsis:
            ellipsis = True
            spec.append(Ellipsis)
            axis = rank - sum(1 for s in spec if s is not None and s is not Ellipsis)  # conservative
        elif kind == "new":
            spec.append(None)
        elif axis < rank and kind in ("slice", "int"):
            d = shape[axis]
            if kind == "int":
                spec.append(draw(st.integers(-d, d - 1)))
            else:
                step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
                start = draw(st.one_of(st.none(), st.integers(-d - 2, d + 2)))
                stop = draw(st.one_of(st.none(), st.integers(-d - 2, d + 2)))
                spec.append(slice(start, stop, step))
            axis += 1
    consumed = sum(1 for s in spec if s is not None and s is not Ellipsis)
    assume(consumed <= rank)
    spec_t = tuple(spec)
    try:
        out = np.zeros(shape)[spec_t].shape
    except IndexError:
        assume(False)
    assume(0 < len(out) <= 4 and 0 not in out)
    return shape, spec_t, draw(st.sampled_from([0, 5, -7]))


@given(strided_case())
def test_strided_slice(case):
    shape, spec, junk = case
    model = strided_model(shape, spec, junk)
    assert support_reason(model) is None, (spec, support_reason(model))
    assert_matches_litert(model)


def test_strided_slice_examples():
    for shape, spec in [((3, 4), (slice(None, None, -1),)), ((2, 3, 9), (Ellipsis, slice(1, None, 2))),
                        ((5, 7), (slice(-1, -6, -2), 2)), ((3, 4), (None, slice(1, 3))),
                        ((3, 4), (slice(None), None)), ((2, 3, 4), (1, Ellipsis, slice(1, 3))),
                        ((1, 6, 6, 5), (slice(None), slice(None, None, 2), slice(1, None, 2), slice(None)))]:
        assert_matches_litert(strided_model(shape, spec))


def test_strided_slice_begin_mask_on_shrunk_axis():
    """LiteRT applies begin_mask to a shrunk axis too (it reads index 0, not begin)."""
    mb = ModelBuilder()
    x = mb.input("x", (3, 4))
    ins = [x] + [mb.const(n, np.array(v, np.int32)) for n, v in zip("bes", ([2, 0], [3, 4], [1, 1]))]
    mb.output(mb.op("STRIDED_SLICE", ins, (4,), {"begin_mask": 1, "shrink_axis_mask": 1}))
    assert_matches_litert(mb.build())


def test_strided_slice_offset():
    assert_matches_litert(strided_model((4, 6, 5), (slice(1, 3), slice(0, 5, 2), slice(2, 5)), offset=True))


def test_unsupported_variants_fall_back():
    mb = ModelBuilder()
    x = mb.input("x", (4, 6))
    b = mb.input("b", (2,), np.int32)
    ins = [x, b, mb.const("e", np.array([3, 6], np.int32)), mb.const("s", np.array([1, 2], np.int32))]
    mb.output(mb.op("STRIDED_SLICE", ins, (2, 3)))
    model = mb.build()
    assert "constant" in (support_reason(model) or "")
    feeds = {0: np.arange(24, dtype=np.float32).reshape(4, 6), 1: np.array([1, 0], np.int32)}
    assert_matches_litert(model, feeds, all_gpu=False)
    # A shrunk axis with a negative stride: LiteRT's result is not defined, so the GPU must not claim it.
    mb = ModelBuilder()
    x = mb.input("x", (3, 4))
    ins = [x] + [mb.const(n, np.array(v, np.int32)) for n, v in zip("bes", ([1, 0], [0, 4], [-1, 1]))]
    mb.output(mb.op("STRIDED_SLICE", ins, (4,), {"shrink_axis_mask": 1}))
    assert "negative stride" in (support_reason(mb.build()) or "")
