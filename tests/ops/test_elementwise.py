"""Unary and binary elementwise ops vs LiteRT: random ranks 1-4, odd channels, broadcasting every way."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine import Interpreter
from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.reference import run_reference

UNARY = ["ABS", "CEIL", "COS", "ELU", "EXP", "FLOOR", "HARD_SWISH", "LOGISTIC", "NEG", "RELU", "RELU6",
         "RELU_N1_TO_1", "RELU_0_TO_1", "SIN", "SQUARE", "TANH"]
POSITIVE_UNARY = ["LOG", "SQRT", "RSQRT"]
BINARY = ["ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "FLOOR_DIV", "FLOOR_MOD"]
FUSED = ["NONE", "RELU", "RELU6", "RELU_N1_TO_1"]


def _rng(draw: st.DrawFn) -> np.random.Generator:
    """Structure (ranks, dims, broadcast masks) comes from a drawn seed: hypothesis's first examples are
    minimal (all-1 shapes), which would leave broadcasting barely tested in 10 examples."""
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


@st.composite
def shapes(draw: st.DrawFn, min_rank: int = 1) -> tuple[int, ...]:
    rng = _rng(draw)
    rank = int(rng.integers(min_rank, 5))
    return (*(int(d) for d in rng.integers(1, 6, rank - 1)), int(rng.choice([1, 3, 5, 7])))


@st.composite
def broadcast_pair(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Two shapes broadcasting to `out`: right-aligned suffixes of one shape, some dims set to 1, so either
    operand may be the bigger one, ranks may differ and both may broadcast ([1,1,1,C] vs [N,H,W,1])."""
    out = draw(shapes())
    rng = _rng(draw)

    def one() -> tuple[int, ...]:
        rank = int(rng.integers(0, len(out) + 1)) if rng.random() < 0.6 else len(out)
        return tuple(d if rng.random() < 0.6 else 1 for d in out[len(out) - rank:])

    a, b = one(), one()
    return a, b, tuple(np.broadcast_shapes(a, b))


def away_from_zero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.uniform(0.5, 4.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


@given(shape=shapes(), alpha=st.floats(-0.5, 2.0, width=32), seed=st.integers(0, 2**16))
def test_unary_ops(shape: tuple[int, ...], alpha: float, seed: int) -> None:
    """Every unary op on one input in one model (one compile per example)."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    p = mb.input("p", shape)
    outs = [mb.op(code, [x], shape) for code in UNARY]
    outs += [mb.op("GELU", [x], shape, {"approximate": approx}) for approx in (False, True)]
    outs.append(mb.op("LEAKY_RELU", [x], shape, {"alpha": alpha}))
    outs += [mb.op(code, [p], shape) for code in POSITIVE_UNARY]
    mb.output(*outs)
    feeds = {x: rng.uniform(-8, 8, shape).astype(np.float32),
             p: rng.uniform(0.01, 50, shape).astype(np.float32)}
    assert_matches_litert(mb.build(), feeds)


@pytest.mark.fp32_only("inputs up to 3e38: f16 holds at most 65504, and SIN/COS of 1e4 need f32's resolution")
@pytest.mark.parametrize("code", ["TANH", "LOGISTIC", "GELU", "ELU", "HARD_SWISH", "SIN", "COS"])
def test_unary_huge_inputs_nan_free(code: str) -> None:
    """tanh(+-1e4) must be +-1, not NaN (WGSL's tanh is sinh/cosh on some drivers); sin/cos reduce first; no
    intermediate may overflow (HARD_SWISH's x * 6, LOGISTIC's 1 / (1 + exp(1e30)): NaN or inf on an H100).
    Up to +-2e4 the oracle is LiteRT. Past that (+-1e30, +-3e38) LiteRT's own answer depends on the host's
    instruction set (its LOGISTIC gives NaN there on AVX-512 hosts), so the oracle is the op's definition in
    float64 (gpuengine.reference)."""
    moderate = np.array([[1e4, -1e4, 3e4, -2e4, 88.0, -88.0, 0.0, 1e-6, -1e-6, 5000.5, 20.0, -20.0]], np.float32)
    it = assert_matches_litert(_unary(code, moderate.shape), {0: moderate})
    assert not np.isnan(it.get_tensor(it.get_output_details()[0]["index"])).any()
    if code in ("SIN", "COS"):
        return
    huge = np.array([[1e30, -1e30, 3e38, -3e38]], np.float32)
    model = _unary(code, huge.shape)
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], huge)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    (exact,) = run_reference(model, [huge]).values()
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=0)


def _unary(code: str, shape: tuple[int, ...]) -> bytes:
    """A model of one unary op; its input is tensor 0."""
    mb = ModelBuilder()
    x = mb.input("x", shape)
    mb.output(mb.op(code, [x], shape))
    return mb.build()


@pytest.mark.fp32_only("inputs of 1e20 and 3e38 are inf in f16")
def test_unary_infinite_inputs() -> None:
    """+-inf and values whose intermediates would overflow (x * 6 in HARD_SWISH, exp(-x) in LOGISTIC, x^3 in
    GELU's tanh form): the GPU gives LiteRT's results, NaN exactly where LiteRT has NaN (e.g. -inf * 0)."""
    data = np.array([[np.inf, -np.inf, 3e38, -3e38, 1e20, -1e20, 88.0, -88.0, -104.0, 0.0]], np.float32)
    mb = ModelBuilder()
    x = mb.input("x", data.shape)
    outs = [mb.op(code, [x], data.shape) for code in ("LOGISTIC", "HARD_SWISH", "TANH", "ELU")]
    outs += [mb.op("GELU", [x], data.shape, {"approximate": approx}) for approx in (False, True)]
    mb.output(*outs)
    it = assert_matches_litert(mb.build(), {x: data})
    logistic = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_array_equal(logistic[0, :6], [1, 0, 1, 0, 1, 0])


@given(shapes=broadcast_pair(), const=st.sampled_from(["none", "none", "b", "a", "b_scalar"]),
       fused=st.sampled_from(FUSED), seed=st.integers(0, 2**16))
def test_binary_ops_broadcast(shapes: tuple, const: str, fused: str, seed: int) -> None:
    """All binary ops on one operand pair: numpy broadcasting either way, rank mismatch, constant operands."""
    sa, sb, _ = shapes
    rng = np.random.default_rng(seed)
    if const == "b_scalar":
        sb = ()
    a_data = rng.uniform(-8, 8, sa).astype(np.float32)
    b_data = away_from_zero(rng, sb)  # a divisor for DIV / FLOOR_DIV / FLOOR_MOD
    mb = ModelBuilder()
    feeds = {}
    if const == "a":
        a = mb.const("a", a_data)
    else:
        a = mb.input("a", sa)
        feeds[a] = a_data
    if const in ("b", "b_scalar"):
        b = mb.const("b", b_data)
    else:
        b = mb.input("b", sb)
        feeds[b] = b_data
    out = tuple(np.broadcast_shapes(sa, sb))
    outs = []
    for code in BINARY:
        options = {"fused_activation_function": fused} if code in ("ADD", "SUB", "MUL", "DIV") else None
        outs.append(mb.op(code, [a, b], out, options))
    mb.output(*outs)
    assert_matches_litert(mb.build(), feeds)


@pytest.mark.fp32_only("POW of a negative base is NaN unless the exponent is integral, which f16 rounding changes")
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("sa, sb", [
    ((1, 1, 1, 7), (2, 3, 5, 1)),  # [1,1,1,C] vs [N,H,W,1]: both broadcast, the output is bigger than either
    ((2, 1, 5, 7), (3, 1, 7)),  # rank mismatch: the rank-3 operand's B axis is the output's H axis
    ((2, 3, 4, 5), (3, 1, 5)),
    ((4, 1), (3, 1, 5)),  # rank 2 vs rank 3, output channels from the second operand
    ((2, 3, 5), (5,)),
    ((6, 3), (2, 1, 1, 3)),
])
def test_rank_mismatch_broadcast(sa: tuple, sb: tuple, swap: bool) -> None:
    """Non-constant operands of lower rank are stored in their own rank's layout and must be re-indexed."""
    if swap:
        sa, sb = sb, sa
    out = tuple(np.broadcast_shapes(sa, sb))
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    mb = ModelBuilder()
    a, b = mb.input("a", sa), mb.input("b", sb)
    mb.output(*[mb.op(code, [a, b], out) for code in BINARY])
    feeds = {a: rng.uniform(-8, 8, sa).astype(np.float32), b: away_from_zero(rng, sb)}
    assert_matches_litert(mb.build(), feeds)


@given(shapes=broadcast_pair(), const=st.booleans(), seed=st.integers(0, 2**16))
def test_pow(shapes: tuple, const: bool, seed: int) -> None:
    """POW where std::pow is real: positive bases with any exponent, negative bases with integral ones."""
    sa, sb, out = shapes
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    x, neg = mb.input("x", sa), mb.input("neg", sa)
    if const:
        e, k = mb.const("e", rng.uniform(-3, 3, sb).astype(np.float32)), \
            mb.const("k", rng.integers(-3, 4, sb).astype(np.float32))
        feeds = {}
    else:
        e, k = mb.input("e", sb), mb.input("k", sb)
        feeds = {e: rng.uniform(-3, 3, sb).astype(np.float32), k: rng.integers(-3, 4, sb).astype(np.float32)}
    feeds[x] = rng.uniform(0.1, 4, sa).astype(np.float32)
    feeds[neg] = rng.uniform(-3, 3, sa).astype(np.float32)
    mb.output(mb.op("POW", [x, e], out), mb.op("POW", [neg, k], out))
    assert_matches_litert(mb.build(), feeds)


def test_pow_edge_cases() -> None:
    """0^y, x^0 and negative bases with fractional exponents (NaN) follow std::pow."""
    base = np.array([[0, 0, 0, 2, -2, -2, -2, 3, -0.5, 0]], np.float32)
    expo = np.array([[2, -1, 0, 0, 0, 3, 0.5, -2, -3, 0.5]], np.float32)
    mb = ModelBuilder()
    a, b = mb.input("a", base.shape), mb.input("b", base.shape)
    mb.output(mb.op("POW", [a, b], base.shape))
    assert_matches_litert(mb.build(), {a: base, b: expo})


@st.composite
def prelu_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    x = draw(shapes())
    kind = draw(st.sampled_from(["channel", "broadcast", "full"]))
    if kind == "channel":
        return x, (x[-1],)
    if kind == "full":
        return x, x
    rng = _rng(draw)
    rank = int(rng.integers(1, len(x) + 1))
    return x, tuple(d if rng.random() < 0.5 else 1 for d in x[len(x) - rank:])


@given(shapes=prelu_shapes(), const=st.booleans(), seed=st.integers(0, 2**16))
def test_prelu(shapes: tuple, const: bool, seed: int) -> None:
    sx, salpha = shapes
    rng = np.random.default_rng(seed)
    alpha = rng.uniform(-1, 1, salpha).astype(np.float32)
    mb = ModelBuilder()
    x = mb.input("x", sx)
    feeds = {x: rng.uniform(-4, 4, sx).astype(np.float32)}
    if const:
        al = mb.const("alpha", alpha)
    else:
        al = mb.input("alpha", salpha)
        feeds[al] = alpha
    mb.output(mb.op("PRELU", [x, al], sx))
    assert_matches_litert(mb.build(), feeds)


def _reasons(model: bytes) -> dict[str, str | None]:
    graph = read_model(model).main
    return {op.code: registry.check(op, graph) for op in graph.ops}


@pytest.mark.parametrize("fused", ["TANH", "SIGN_BIT"])
def test_fused_tanh_is_left_to_litert(fused: str) -> None:
    """LiteRT's float ADD/MUL ignore a fused TANH/SIGN_BIT; the GPU refuses it and the CPU result is used."""
    mb = ModelBuilder()
    a, b = mb.input("a", (2, 5)), mb.input("b", (5,))
    y = mb.op("ADD", [a, b], (2, 5), {"fused_activation_function": fused})
    mb.output(mb.op("RELU", [y], (2, 5)))
    model = mb.build()
    reason = _reasons(model)["ADD"]
    assert reason and fused in reason
    assert _reasons(model)["RELU"] is None
    assert_matches_litert(model, all_gpu=False)


def test_rank5_falls_back() -> None:
    shape = (2, 1, 2, 3, 5)
    mb = ModelBuilder()
    a, b = mb.input("a", shape), mb.input("b", shape)
    mb.output(mb.op("SUB", [a, b], shape))
    model = mb.build()
    assert "rank 5" in _reasons(model)["SUB"]
    assert_matches_litert(model, all_gpu=False)
