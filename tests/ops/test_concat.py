"""CONCATENATION and PACK against LiteRT: ranks 1-4, every axis (negative too), 1-10 inputs, constants."""

from __future__ import annotations

import numpy as np
from helpers import assert_matches_litert, lowering, support_reason
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder

DIMS = [1, 2, 3, 5, 7]
CHANNELS = [1, 3, 4, 5, 7, 8]


def concat_model(shapes: list[tuple[int, ...]], axis: int, consts: list[bool] | None = None,
                 activation: str | None = None) -> bytes:
    rank = len(shapes[0])
    a = axis % rank
    out = shapes[0][:a] + (sum(s[a] for s in shapes),) + shapes[0][a + 1:]
    mb = ModelBuilder()
    rng = np.random.default_rng(3)
    ins = [mb.const(f"c{k}", rng.normal(size=s).astype(np.float32)) if consts and consts[k]
           else mb.input(f"x{k}", s) for k, s in enumerate(shapes)]
    options = {"axis": axis}
    if activation:
        options["fused_activation_function"] = activation
    mb.output(mb.op("CONCATENATION", ins, out, options))
    return mb.build()


@st.composite
def concat_case(draw, max_inputs: int = 4):
    rank = draw(st.integers(1, 4))
    base = [draw(st.sampled_from(DIMS)) for _ in range(rank - 1)] + [draw(st.sampled_from(CHANNELS))]
    axis = draw(st.integers(-rank, rank - 1))
    n = draw(st.integers(1, max_inputs))
    shapes = []
    for _ in range(n):
        s = list(base)
        s[axis] = draw(st.sampled_from(CHANNELS if axis % rank == rank - 1 else DIMS))
        shapes.append(tuple(s))
    return shapes, axis


@given(concat_case())
def test_concat(case):
    shapes, axis = case
    assert_matches_litert(concat_model(shapes, axis))


@given(concat_case(), st.data())
def test_concat_with_constants(case, data):
    shapes, axis = case
    consts = [data.draw(st.booleans()) for _ in shapes]
    consts[data.draw(st.integers(0, len(shapes) - 1))] = False  # keep one graph input
    assert_matches_litert(concat_model(shapes, axis, consts))


@given(concat_case(max_inputs=10).filter(lambda c: len(c[0]) > 7))
def test_concat_many_inputs(case):
    """More inputs than one dispatch may bind: later dispatches continue from the partial output."""
    shapes, axis = case
    model = concat_model(shapes, axis)
    assert len(lowering(model)) == 2
    assert_matches_litert(model)


def test_channel_concat_paths():
    aligned = concat_model([(1, 3, 3, 8), (1, 3, 3, 4), (1, 3, 3, 5)], -1)
    assert "vec4" in lowering(aligned)[0].label
    assert_matches_litert(aligned)
    unaligned = concat_model([(1, 3, 3, 3), (1, 3, 3, 5)], 3)
    assert "vec4" not in lowering(unaligned)[0].label
    assert_matches_litert(unaligned)
    rows = concat_model([(2, 3, 7), (2, 5, 7)], 1)
    assert "vec4" in lowering(rows)[0].label
    assert_matches_litert(rows)


def test_same_tensor_twice():
    mb = ModelBuilder()
    x = mb.input("x", (2, 3, 5))
    mb.output(mb.op("CONCATENATION", [x, x, x], (2, 3, 15), {"axis": 2}))
    assert_matches_litert(mb.build())


def test_fused_activation_left_to_litert():
    model = concat_model([(1, 4), (1, 3)], 1, activation="RELU")
    assert "activation" in (support_reason(model) or "")
    assert_matches_litert(model, all_gpu=False)


@given(st.lists(st.sampled_from(DIMS), min_size=0, max_size=3), st.integers(1, 5), st.data())
def test_pack(shape, n, data):
    rank = len(shape) + 1
    axis = data.draw(st.integers(-rank, rank - 1))
    a = axis % rank
    out = tuple(shape[:a]) + (n,) + tuple(shape[a:])
    mb = ModelBuilder()
    ins = [mb.input(f"x{k}", tuple(shape)) for k in range(n)]
    mb.output(mb.op("PACK", ins, out, {"axis": axis, "values_count": n}))
    assert_matches_litert(mb.build())
