"""Float comparisons -> SELECT / SELECT_V2 on the GPU (bool as float 0/1) vs LiteRT, and the CPU fallbacks."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

COMPARE = ["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"]


@st.composite
def three_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], ...]:
    """Four shapes (a, b, x, y) broadcasting together: suffixes of one shape with some dims set to 1."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rank = int(rng.integers(1, 5))
    full = (*(int(d) for d in rng.integers(1, 5, rank - 1)), int(rng.choice([1, 3, 5, 7])))

    def one() -> tuple[int, ...]:
        r = int(rng.integers(0, rank + 1)) if rng.random() < 0.5 else rank
        return tuple(d if rng.random() < 0.6 else 1 for d in full[rank - r:])

    return one(), one(), one(), one()


def small_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values from {-2..2} so EQUAL / LESS_EQUAL ties actually occur."""
    return rng.integers(-2, 3, shape).astype(np.float32)


def _reasons(model: bytes) -> dict[str, str | None]:
    graph = read_model(model).main
    return {op.code: registry.check(op, graph) for op in graph.ops}


@given(shapes=three_shapes(), const_b=st.booleans(), seed=st.integers(0, 2**16))
def test_compare_select_v2(shapes: tuple, const_b: bool, seed: int) -> None:
    """Every comparison feeding a SELECT_V2, all four operands broadcasting, all on the GPU."""
    sa, sb, sx, sy = shapes
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    a, x, y = mb.input("a", sa), mb.input("x", sx), mb.input("y", sy)
    feeds = {a: small_ints(rng, sa), x: rng.uniform(-4, 4, sx).astype(np.float32),
             y: rng.uniform(-4, 4, sy).astype(np.float32)}
    if const_b:
        b = mb.const("b", small_ints(rng, sb))
    else:
        b = mb.input("b", sb)
        feeds[b] = small_ints(rng, sb)
    cond_shape = tuple(np.broadcast_shapes(sa, sb))
    out = tuple(np.broadcast_shapes(cond_shape, sx, sy))
    outs = []
    for code in COMPARE:
        cond = mb.op(code, [a, b], cond_shape, dtype=np.bool_)
        outs.append(mb.op("SELECT_V2", [cond, x, y], out))
    mb.output(*outs)
    assert_matches_litert(mb.build(), feeds)


def test_greater_select_v2_chain_with_scalar_and_two_consumers() -> None:
    """GREATER against a scalar constant, read by two selects (one swapping x and y), then more GPU math."""
    shape = (2, 3, 4, 5)
    mb = ModelBuilder()
    x, y = mb.input("x", shape), mb.input("y", (5,))
    cond = mb.op("GREATER", [x, mb.const("zero", np.float32(0.25))], shape, dtype=np.bool_)
    s1 = mb.op("SELECT_V2", [cond, x, y], shape)
    s2 = mb.op("SELECT_V2", [cond, y, mb.const("k", np.float32(-3.0))], shape)
    mb.output(mb.op("ADD", [s1, s2], shape))
    model = mb.build()
    assert all(r is None for r in _reasons(model).values())
    assert_matches_litert(model)


@pytest.mark.parametrize("cond_kind", ["same", "scalar_const", "rank1_const", "same_const"])
def test_select_v1(cond_kind: str) -> None:
    """SELECT (v1): condition of x's shape, a scalar, or one value per slice of x's first axis."""
    shape = (3, 2, 5, 3)
    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    x, y = mb.input("x", shape), mb.input("y", shape)
    if cond_kind == "same":
        cond = mb.op("LESS_EQUAL", [x, y], shape, dtype=np.bool_)
    elif cond_kind == "scalar_const":
        cond = mb.const("c", np.bool_(False))
    elif cond_kind == "rank1_const":
        cond = mb.const("c", np.array([True, False, True]))
    else:
        cond = mb.const("c", rng.random(shape) < 0.5)
    mb.output(mb.op("SELECT", [cond, x, y], shape))
    assert_matches_litert(mb.build())


def test_select_v2_constant_condition_broadcast() -> None:
    mb = ModelBuilder()
    x, y = mb.input("x", (2, 1, 7)), mb.input("y", (4, 1))
    cond = mb.const("c", np.array([True, False, False, True, True, False, True]))
    mb.output(mb.op("SELECT_V2", [cond, x, y], (2, 4, 7)))
    assert_matches_litert(mb.build())


def test_comparison_as_model_output_runs_on_gpu() -> None:
    """A bool model output comes from the GPU (bools are held as 1.0 / 0.0 and cross the boundary as bool)."""
    shape = (1, 4, 4, 3)
    mb = ModelBuilder()
    a, b = mb.input("a", shape), mb.input("b", shape)
    cond = mb.op("GREATER", [a, b], shape, dtype=np.bool_)
    sel = mb.op("SELECT_V2", [cond, a, b], shape)
    mb.output(cond, mb.op("RELU", [sel], shape))
    model = mb.build()
    assert all(reason is None for reason in _reasons(model).values())
    it = assert_matches_litert(model)
    assert it.get_tensor(cond).dtype == np.bool_


def test_comparison_read_by_cast_runs_on_gpu() -> None:
    shape = (2, 5)
    mb = ModelBuilder()
    a, b = mb.input("a", shape), mb.input("b", (5,))
    cond = mb.op("LESS", [a, b], shape, dtype=np.bool_)
    mb.output(mb.op("CAST", [cond], shape))
    model = mb.build()
    assert all(reason is None for reason in _reasons(model).values())
    assert_matches_litert(model)


def test_select_with_int_values_and_bool_input_condition() -> None:
    """int32 values and a bool model input as the condition run on the GPU (lowering/kernels/common.py EXACT_TYPES)."""
    shape = (2, 3)
    mb = ModelBuilder()
    c = mb.input("c", shape, np.bool_)
    x, y = mb.input("x", shape, np.int32), mb.input("y", shape, np.int32)
    f = mb.input("f", shape)
    mb.output(mb.op("SELECT_V2", [c, x, y], shape, dtype=np.int32), mb.op("SELECT_V2", [c, f, f], shape))
    model = mb.build()
    graph = read_model(model).main
    assert [registry.check(op, graph) for op in graph.ops] == [None, None]
    assert_matches_litert(model)


def test_rank1_select_condition_from_comparison_falls_back() -> None:
    """SELECT's rank-1 condition over x's first axis is only laid out for constants; a computed one (with the
    comparison producing it) stays on the CPU."""
    mb = ModelBuilder()
    v, w = mb.input("v", (3,)), mb.input("w", (3,))
    x, y = mb.input("x", (3, 4)), mb.input("y", (3, 4))
    cond = mb.op("LESS", [v, w], (3,), dtype=np.bool_)
    mb.output(mb.op("SELECT", [cond, x, y], (3, 4)))
    model = mb.build()
    reasons = _reasons(model)
    assert "rank-1 SELECT condition" in reasons["SELECT"]
    assert reasons["LESS"] is None  # its bool crosses to the CPU select as a bool
    assert_matches_litert(model, all_gpu=False)
