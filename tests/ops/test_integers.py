"""int32 and bool tensors on the GPU (held as exact f32 values, f32 in fp16 mode too) against LiteRT: comparisons,
logic, REDUCE_ALL/ANY, SELECT/SELECT_V2 of ints, CAST, exact integer arithmetic, copies of ints and BROADCAST_TO,
and the causal-mask chain of litert-torch decoders."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_gpuengine, tolerance

from gpuengine.model.builder import ModelBuilder
from gpuengine.oracle import run_litert


def check(model: bytes, feeds: dict[int, np.ndarray], tol: float = 1e-5) -> None:
    """Every op on the GPU; int / bool outputs equal LiteRT's exactly (dtype too), float ones within tol."""
    want = run_litert(model, feeds)
    got, it = run_gpuengine(model, feeds)
    plan = it.compiled.plan
    assert all(p.device == "gpu" for p in plan.partitions), plan.unsupported
    for t, ref in want.items():
        assert got[t].dtype == ref.dtype and got[t].shape == ref.shape, t
        if ref.dtype in (np.int32, np.bool_):
            np.testing.assert_array_equal(got[t], ref)
        else:
            np.testing.assert_allclose(got[t], ref, rtol=0, atol=tolerance(it, tol))


@pytest.mark.parametrize("code", ["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"])
def test_int_comparisons(code: str):
    mb = ModelBuilder()
    a, b = mb.input("a", (2, 3, 5), np.int32), mb.input("b", (3, 5), np.int32)
    mb.output(mb.op(code, [a, b], (2, 3, 5), dtype=np.bool_))
    mb.output(mb.op(code, [a, mb.const("k", np.int32(3000))], (2, 3, 5), dtype=np.bool_))
    rng = np.random.default_rng(1)
    check(mb.build(), {a: rng.integers(2995, 3005, (2, 3, 5)).astype(np.int32),
                       b: rng.integers(2995, 3005, (3, 5)).astype(np.int32)})


def test_logic_reduce_and_select():
    """LOGICAL_AND/OR/NOT, REDUCE_ALL/ANY, and SELECT_V2 of int32 and float32 by the result."""
    mb = ModelBuilder()
    shape = (2, 4, 6)
    p, q = mb.input("p", shape, np.bool_), mb.input("q", shape, np.bool_)
    x, i = mb.input("x", shape), mb.input("i", shape, np.int32)
    both = mb.op("LOGICAL_AND", [p, q], shape, dtype=np.bool_)
    either = mb.op("LOGICAL_OR", [p, q], shape, dtype=np.bool_)
    mb.output(mb.op("LOGICAL_NOT", [both], shape, dtype=np.bool_))
    axes = mb.const("axes", np.array([2], np.int32))
    mb.output(mb.op("REDUCE_ALL", [either, axes], (2, 4), {"keep_dims": False}, dtype=np.bool_))
    mb.output(mb.op("REDUCE_ANY", [both, axes], (2, 4, 1), {"keep_dims": True}, dtype=np.bool_))
    mb.output(mb.op("SELECT_V2", [both, i, mb.const("minus", np.int32(-7))], shape, dtype=np.int32))
    mb.output(mb.op("SELECT_V2", [either, x, mb.const("low", np.float32(-1e4))], shape))
    mb.output(mb.op("SELECT", [p, i, mb.op("ADD", [i, i], shape, dtype=np.int32)], shape, dtype=np.int32))
    rng = np.random.default_rng(2)
    check(mb.build(), {p: rng.random(shape) < 0.7, q: rng.random(shape) < 0.7,
                       x: rng.standard_normal(shape).astype(np.float32),
                       i: rng.integers(-5000, 5000, shape).astype(np.int32)})


def test_cast():
    """float -> int32 truncates toward zero; -> bool is != 0; bool and int32 -> float32 exactly."""
    mb = ModelBuilder()
    shape = (3, 7)
    x, i, p = mb.input("x", shape), mb.input("i", shape, np.int32), mb.input("p", shape, np.bool_)
    mb.output(mb.op("CAST", [x], shape, dtype=np.int32))
    mb.output(mb.op("CAST", [x], shape, dtype=np.bool_))
    mb.output(mb.op("CAST", [i], shape))
    mb.output(mb.op("CAST", [i], shape, dtype=np.bool_))
    mb.output(mb.op("CAST", [p], shape, dtype=np.int32))
    mb.output(mb.op("CAST", [p], shape))
    rng = np.random.default_rng(3)
    values = (rng.integers(-2000, 2000, shape) / 4).astype(np.float32)  # quarters: exact in f16 too
    values[0, :4] = [0.0, -0.5, 2.75, -2.75]
    check(mb.build(), {x: values, i: rng.integers(-3, 3, shape).astype(np.int32), p: rng.random(shape) < 0.5})


def test_int_arithmetic_is_exact_beyond_f16():
    """Positions past 2048 (where f16 stops being exact): ADD/SUB/MUL/MAXIMUM/MINIMUM/ABS/NEG of int32 exact, in the
    fp16 run too (integer tensors stay f32)."""
    mb = ModelBuilder()
    shape = (1, 2, 3, 5)
    a, b = mb.input("a", shape, np.int32), mb.input("b", shape, np.int32)
    s = mb.op("ADD", [a, mb.const("one", np.int32(1))], shape, dtype=np.int32)
    mb.output(mb.op("SUB", [s, b], shape, dtype=np.int32))
    mb.output(mb.op("MUL", [a, mb.const("three", np.int32(3))], shape, dtype=np.int32))
    mb.output(mb.op("MAXIMUM", [a, b], shape, dtype=np.int32))
    mb.output(mb.op("MINIMUM", [a, b], shape, dtype=np.int32))
    mb.output(mb.op("ABS", [mb.op("NEG", [b], shape, dtype=np.int32)], shape, dtype=np.int32))
    rng = np.random.default_rng(4)
    check(mb.build(), {a: rng.integers(2049, 100_000, shape).astype(np.int32),
                       b: rng.integers(-100_000, 100_000, shape).astype(np.int32)})


def test_int_copies_and_broadcast_to():
    """RESHAPE / SLICE / PACK / CONCATENATION / TRANSPOSE of int32, BROADCAST_TO of floats and ints."""
    mb = ModelBuilder()
    pos = mb.input("pos", (6,), np.int32)
    x = mb.input("x", (4, 1, 5))
    row = mb.op("RESHAPE", [pos, mb.const("s", np.array([2, 3], np.int32))], (2, 3), dtype=np.int32)
    mb.output(mb.op("TRANSPOSE", [row, mb.const("perm", np.array([1, 0], np.int32))], (3, 2), dtype=np.int32))
    first = mb.op("SLICE", [pos, mb.const("b", np.array([2], np.int32)), mb.const("n", np.array([1], np.int32))],
                  (1,), dtype=np.int32)
    scalar = mb.op("RESHAPE", [first, mb.const("e", np.zeros(0, np.int32))], (), dtype=np.int32)
    zero = mb.const("zero", np.int32(0))
    mb.output(mb.op("PACK", [zero, scalar, zero, zero], (4,), {"values_count": 4, "axis": 0}, dtype=np.int32))
    mb.output(mb.op("CONCATENATION", [pos, pos], (12,), {"axis": 0}, dtype=np.int32))
    mb.output(mb.op("BROADCAST_TO", [x, mb.const("to", np.array([2, 4, 3, 5], np.int32))], (2, 4, 3, 5)))
    mb.output(mb.op("BROADCAST_TO", [row, mb.const("to2", np.array([4, 2, 3], np.int32))], (4, 2, 3),
                    dtype=np.int32))
    rng = np.random.default_rng(5)
    check(mb.build(), {pos: rng.integers(0, 70_000, (6,)).astype(np.int32),
                       x: rng.standard_normal((4, 1, 5)).astype(np.float32)})


def test_causal_mask_chain():
    """litert-torch's mask building: positions compared with the cache's, LOGICAL_AND, REDUCE_ALL, SELECT_V2."""
    mb = ModelBuilder()
    n, cache = 5, 16
    pos = mb.input("input_pos", (n,), np.int32)
    ok = mb.op("LESS", [pos, mb.const("limit", np.full((n,), cache, np.int32))], (n,), dtype=np.bool_)
    col = mb.op("RESHAPE", [pos, mb.const("shape", np.array([n, 1], np.int32))], (n, 1), dtype=np.int32)
    keys = mb.const("keys", np.arange(cache, dtype=np.int32).reshape(1, cache))
    seen = mb.op("GREATER_EQUAL", [col, keys], (n, cache), dtype=np.bool_)
    low = mb.op("LESS_EQUAL", [mb.const("zero", np.zeros((n, 1), np.int32)), col], (n, 1), dtype=np.bool_)
    both = mb.op("LOGICAL_AND", [seen, low], (n, cache), dtype=np.bool_)
    valid = mb.op("REDUCE_ALL", [mb.op("RESHAPE", [ok, mb.const("s2", np.array([n, 1], np.int32))], (n, 1),
                                       dtype=np.bool_), mb.const("ax", np.array([1], np.int32))], (n,),
                  {"keep_dims": False}, dtype=np.bool_)
    mask = mb.op("SELECT_V2", [both, mb.const("open", np.float32(0.0)), mb.const("shut", np.float32(-1e4))],
                 (n, cache))
    vcol = mb.op("RESHAPE", [valid, mb.const("s3", np.array([n, 1], np.int32))], (n, 1), dtype=np.bool_)
    mb.output(mb.op("SELECT_V2", [vcol, mask, mb.const("nan_row", np.float32(-2.0))], (n, cache)))
    check(mb.build(), {pos: np.array([3, 4, 5, 6, 17], np.int32)})


def test_large_host_integers_are_refused():
    """An int32 input the GPU cannot hold exactly in f32 (|x| >= 2^24) is a ValueError, never a wrong result."""
    mb = ModelBuilder()
    a = mb.input("a", (4,), np.int32)
    mb.output(mb.op("ADD", [a, mb.const("one", np.int32(1))], (4,), dtype=np.int32))
    with pytest.raises(ValueError, match="2\\^24"):
        run_gpuengine(mb.build(), {a: np.array([1, 2, 3, 1 << 24], np.int32)})
