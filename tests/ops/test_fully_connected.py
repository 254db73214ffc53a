"""FULLY_CONNECTED (rank 2/3/4 inputs flattened as TFLite does, keep_num_dims, optional bias, GEMV path) and
BATCH_MATMUL (rank 2..4, batch broadcasting, adj_x/adj_y, constant second operand) against LiteRT."""

from __future__ import annotations

import numpy as np
from helpers import FUSED_ACTIVATIONS, assert_matches_litert, lowering, support_reason
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.model.builder import ModelBuilder

CHANNELS = [1, 3, 4, 5, 7, 8, 13]


def fc_model(
    xshape: tuple[int, ...],
    o: int,
    inner: int | None = None,
    keep: bool = False,
    act: str = "NONE",
    bias: bool = True,
    seed: int = 0,
) -> bytes:
    """inner: the weights' I (default: the input's last dim); rows = input size / I."""
    rng = np.random.default_rng(seed)
    inner = inner or xshape[-1]
    rows = int(np.prod(xshape)) // inner
    mb = ModelBuilder()
    x = mb.input("x", xshape)
    w = mb.const("w", rng.standard_normal((o, inner)).astype(np.float32))
    b = mb.const("b", rng.standard_normal(o).astype(np.float32)) if bias else -1
    out = (*xshape[:-1], o) if keep else (rows, o)
    mb.output(
        mb.op("FULLY_CONNECTED", [x, w, b], out, {"keep_num_dims": keep, "fused_activation_function": act})
    )
    return mb.build()


def bmm_model(ashape, bshape, adj_x=False, adj_y=False, const_b=False, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    a = mb.input("a", ashape)
    b = mb.const("b", rng.standard_normal(bshape).astype(np.float32)) if const_b else mb.input("b", bshape)
    m = ashape[-1] if adj_x else ashape[-2]
    n = bshape[-2] if adj_y else bshape[-1]
    batch = np.broadcast_shapes(tuple(ashape[:-2]), tuple(bshape[:-2]))
    mb.output(mb.op("BATCH_MATMUL", [a, b], (*batch, m, n), {"adj_x": adj_x, "adj_y": adj_y}))
    return mb.build()


@given(
    st.integers(1, 5),
    st.sampled_from(CHANNELS + [20]),
    st.sampled_from(CHANNELS + [20]),
    st.sampled_from(FUSED_ACTIVATIONS),
    st.booleans(),
)
def test_fc_rank2(batch, i, o, act, bias):
    assert_matches_litert(fc_model((batch, i), o, act=act, bias=bias))


@given(
    st.integers(1, 2),
    st.integers(1, 5),
    st.integers(1, 5),
    st.sampled_from(CHANNELS),
    st.sampled_from(CHANNELS),
    st.booleans(),
    st.sampled_from(FUSED_ACTIVATIONS),
)
def test_fc_rank4(b, h, w, c, o, keep, act):
    """keep_num_dims: rows are pixels; otherwise all of [H, W, C] (h, w, c order) is one row per batch."""
    shape = (b, h, w, c)
    assert_matches_litert(
        fc_model(shape, o, keep=keep, act=act) if keep else fc_model(shape, o, inner=h * w * c, act=act)
    )


@given(
    st.integers(1, 3), st.integers(1, 6), st.sampled_from(CHANNELS), st.sampled_from(CHANNELS), st.booleans()
)
def test_fc_rank3(b, n, i, o, keep):
    assert_matches_litert(fc_model((b, n, i), o, keep=keep))


@given(
    st.sampled_from([(1, 1, 1, 300), (1, 300), (1, 8, 8, 5), (1, 4, 4, 19)]),
    st.sampled_from([1, 7, 10, 33]),
    st.sampled_from(FUSED_ACTIVATIONS),
)
def test_fc_gemv(xshape, o, act):
    """One row with long K (also reading a flattened 4-D input): a discrete GPU splits the row over many
    invocations per output slice; every target equals LiteRT."""
    model = fc_model(xshape, o, inner=int(np.prod(xshape)), act=act)
    (spec,) = lowering(model)
    assert spec.shader == "fully_connected"
    (fc,) = [s for s in assert_matches_litert(model, target="discrete").compiled.gpu_programs[0].info.specs
             if s.shader == "fully_connected"]
    assert fc.decomposition.split >= 16
    assert_matches_litert(model, target="cpu")


def test_fc_rows_of_partial_images():
    """[1, H, W, C] flattened to rows of W*C: row r is image row r."""
    assert_matches_litert(fc_model((1, 6, 5, 13), 3, inner=5 * 13, act="RELU6"))


def test_fc_rejects_rows_splitting_pixels():
    model = fc_model((1, 2, 3, 4), 3, inner=6)
    assert "pixels" in (support_reason(model) or "")
    assert_matches_litert(model, all_gpu=False)


@st.composite
def bmm_case(draw):
    rank_a, rank_b = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    batch = [draw(st.sampled_from([1, 2, 3])) for _ in range(2)]

    def batch_dims(rank: int) -> tuple[int, ...]:
        dims = batch[2 - (rank - 2) :] if rank > 2 else []
        return tuple(d if draw(st.booleans()) else 1 for d in dims)

    m, k, n = (draw(st.sampled_from([1, 2, 3, 5, 7, 9])) for _ in range(3))
    adj_x, adj_y = draw(st.booleans()), draw(st.booleans())
    a = (*batch_dims(rank_a), *((k, m) if adj_x else (m, k)))
    b = (*batch_dims(rank_b), *((n, k) if adj_y else (k, n)))
    return dict(ashape=a, bshape=b, adj_x=adj_x, adj_y=adj_y)


@given(bmm_case())
def test_batch_matmul(case):
    assert_matches_litert(bmm_model(**case))


@given(bmm_case())
def test_batch_matmul_constant_rhs(case):
    assert_matches_litert(bmm_model(**case, const_b=True))


def test_batch_matmul_rejects_rank5():
    model = bmm_model((2, 1, 1, 3, 4), (4, 5))
    assert support_reason(model) is not None
    assert_matches_litert(model, all_gpu=False)
