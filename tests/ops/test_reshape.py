"""RESHAPE / SQUEEZE / EXPAND_DIMS against LiteRT: free Aliases where PHWC4 bytes match, gathers elsewhere."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, lowering, support_reason
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels.base import Alias, KernelSpec
from gpuengine.lowering.kernels.reshape import same_storage
from gpuengine.model.builder import ModelBuilder

DIMS = [1, 2, 3, 5, 7]


def reshape_model(src: tuple[int, ...], dst: tuple[int, ...], how: str = "input",
                  const: bool = False) -> bytes:
    mb = ModelBuilder()
    if const:  # a constant reshaped, then added to a graph input
        x = mb.const("c", np.random.default_rng(1).uniform(-1, 1, src).astype(np.float32))
    else:
        x = mb.input("x", src)
    shape = list(dst)
    if how == "minus1" and shape:
        shape[int(np.argmax(shape))] = -1
    if how == "options":
        y = mb.op("RESHAPE", [x], dst, {"new_shape": shape})
    else:
        y = mb.op("RESHAPE", [x, mb.const("shape", np.array(shape, np.int32))], dst)
    if const:
        y = mb.op("ADD", [y, mb.input("z", dst)], dst)
    mb.output(y)
    return mb.build()


@st.composite
def shape_pair(draw):
    src = tuple(draw(st.sampled_from(DIMS)) for _ in range(draw(st.integers(1, 4))))
    factors = [p for d in src for p in ([2, 2] if d == 4 else [d]) if p > 1]
    rank = draw(st.integers(1, 4))
    dst = [1] * rank
    for p in factors:
        dst[draw(st.integers(0, rank - 1))] *= p
    return src, tuple(dst)


@given(shape_pair(), st.sampled_from(["input", "minus1", "options"]))
def test_reshape(pair, how):
    src, dst = pair
    model = reshape_model(src, dst, how)
    assert_matches_litert(model)
    kinds = [type(x) for x in lowering(model)]
    assert kinds == ([Alias] if same_storage(src, dst) else [KernelSpec])


def test_alias_cases():
    for src, dst in [((1, 8, 8, 16), (1, 64, 16)), ((1, 1, 1, 7), (1, 7)), ((1, 896, 16), (1, 1, 896, 16)),
                     ((2, 3, 4, 3), (2, 12, 3)), ((3, 5, 3), (15, 3))]:
        model = reshape_model(src, dst)
        assert [type(x) for x in lowering(model)] == [Alias], (src, dst)
        assert_matches_litert(model)


def test_non_alias_cases():
    # Batch changes with more than one slice, channel changes, rank changes that move the channel axis.
    for src, dst in [((2, 3, 5), (6, 5)), ((1, 4, 6), (1, 24)), ((1, 7), (7, 1)),
                     ((2, 2, 2, 5), (2, 4, 5, 1))]:
        model = reshape_model(src, dst)
        low = lowering(model)
        assert len(low) == 1 and isinstance(low[0], KernelSpec), (src, dst)
        assert_matches_litert(model)


@given(shape_pair())
def test_reshape_of_constant(pair):
    src, dst = pair
    assert_matches_litert(reshape_model(src, dst, const=True))


@given(st.lists(st.sampled_from(DIMS), min_size=1, max_size=3), st.data())
def test_squeeze_expand_dims(dims, data):
    """EXPAND_DIMS inserts a 1 at a (possibly negative) axis; SQUEEZE removes it again."""
    axis = data.draw(st.integers(-len(dims) - 1, len(dims)))
    pos = axis % (len(dims) + 1)
    expanded = tuple(dims[:pos]) + (1,) + tuple(dims[pos:])
    mb = ModelBuilder()
    x = mb.input("x", tuple(dims))
    y = mb.op("EXPAND_DIMS", [x, mb.const("axis", np.array([axis], np.int32))], expanded)
    z = mb.op("SQUEEZE", [mb.op("RELU", [y], expanded)], tuple(dims), {"squeeze_dims": [pos]})
    mb.output(y, z)
    assert_matches_litert(mb.build())


def test_squeeze_all():
    mb = ModelBuilder()
    x = mb.input("x", (1, 5, 1, 3))
    mb.output(mb.op("SQUEEZE", [x], (5, 3)))
    mb.output(mb.op("SQUEEZE", [mb.input("s", (1, 1, 1))], ()))
    assert_matches_litert(mb.build())


def test_alias_chain():
    """Aliased tensors feed later kernels and graph outputs correctly."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 6))
    a = mb.op("RESHAPE", [x, mb.const("s1", np.array([1, 16, 6], np.int32))], (1, 16, 6))  # alias
    b = mb.op("RELU", [a], (1, 16, 6))
    c = mb.op("RESHAPE", [b, mb.const("s2", np.array([6, 16], np.int32))], (6, 16))  # gather
    d = mb.op("RESHAPE", [c, mb.const("s3", np.array([6, 1, 16], np.int32))], (6, 1, 16))  # alias
    mb.output(a, d)
    assert_matches_litert(mb.build())


def test_dynamic_shape_input_falls_back():
    mb = ModelBuilder()
    x = mb.input("x", (2, 6))
    s = mb.input("s", (2,), np.int32)
    mb.output(mb.op("RESHAPE", [x, s], (3, 4)))
    model = mb.build()
    assert "constant" in (support_reason(model) or "")
    feeds = {0: np.arange(12, dtype=np.float32).reshape(2, 6), 1: np.array([3, 4], np.int32)}
    assert_matches_litert(model, feeds, all_gpu=False)
