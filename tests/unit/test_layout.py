"""PHWC4 layout: indexing and packing checked against an independent numpy reference, ranks 0-4."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuengine.lowering.layout import from_phwc4, phwc4_elements, phwc4_index, slices, to_bhwc, to_phwc4

SHAPES: list[tuple[int, ...]] = [
    (), (1,), (3,), (4,), (5,), (9,),
    (2, 1), (2, 3), (3, 4), (1, 7), (2, 8),
    (2, 3, 1), (1, 5, 6), (2, 2, 9),
    (1, 1, 1, 1), (1, 2, 3, 1), (1, 3, 2, 3), (2, 3, 4, 5), (1, 4, 4, 4), (3, 1, 2, 7), (2, 2, 3, 13),
]


def reference_bhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The documented rank rule, written independently: the last axis is always channels."""
    # Which logical axis (if any) feeds B, H, W; channels are always the last axis.
    sources = {0: (None, None, None, None), 1: (None, None, None, 0), 2: (0, None, None, 1),
               3: (0, None, 1, 2), 4: (0, 1, 2, 3)}[len(shape)]
    b, h, w, c = (1 if axis is None else shape[axis] for axis in sources)
    return b, h, w, c


def reference_pack(array: np.ndarray) -> np.ndarray:
    """Scatter element by element to the documented address (((b*S + c//4)*H + h)*W + w)*4 + c%4."""
    b_, h_, w_, c_ = reference_bhwc(array.shape)
    s_ = -(-c_ // 4)
    out = np.zeros(b_ * s_ * h_ * w_ * 4, np.float32)
    values = array.reshape(b_, h_, w_, c_)
    for b, h, w, c in itertools.product(range(b_), range(h_), range(w_), range(c_)):
        out[(((b * s_ + c // 4) * h_ + h) * w_ + w) * 4 + c % 4] = values[b, h, w, c]
    return out


def logical(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    # Values are nonzero and distinct, so a misplaced or dropped element is always visible.
    n = int(np.prod(shape, dtype=np.int64))
    return (np.random.default_rng(seed).permutation(n) + 1).astype(np.float32).reshape(shape)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_to_bhwc_rule(shape: tuple[int, ...]) -> None:
    assert to_bhwc(shape) == reference_bhwc(shape)
    assert int(np.prod(to_bhwc(shape))) == int(np.prod(shape, dtype=np.int64))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_to_phwc4_matches_reference(shape: tuple[int, ...]) -> None:
    x = logical(shape)
    flat = to_phwc4(x)
    assert flat.dtype == np.float32 and flat.ndim == 1
    assert flat.size == phwc4_elements(shape)
    np.testing.assert_array_equal(flat, reference_pack(x))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip(shape: tuple[int, ...]) -> None:
    x = logical(shape, seed=1)
    back = from_phwc4(to_phwc4(x), shape)
    assert back.shape == shape
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_phwc4_index_agrees_with_packing(shape: tuple[int, ...]) -> None:
    x = logical(shape, seed=2)
    flat = to_phwc4(x)
    b_, h_, w_, c_ = to_bhwc(shape)
    values = x.reshape(b_, h_, w_, c_)
    seen = set()
    for b, h, w, c in itertools.product(range(b_), range(h_), range(w_), range(c_)):
        i = phwc4_index(shape, b, h, w, c)
        assert 0 <= i < flat.size
        assert flat[i] == values[b, h, w, c], (b, h, w, c)
        seen.add(i)
    assert len(seen) == x.size  # one address per element


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_padding_lanes_are_zero(shape: tuple[int, ...]) -> None:
    flat = to_phwc4(logical(shape, seed=3))  # every logical value is >= 1
    b_, h_, w_, c_ = to_bhwc(shape)
    used = np.zeros(flat.size, bool)
    for b, h, w, c in itertools.product(range(b_), range(h_), range(w_), range(c_)):
        used[phwc4_index(shape, b, h, w, c)] = True
    assert np.all(flat[~used] == 0)
    assert np.all(flat[used] >= 1)
    lanes = flat.reshape(-1, 4)
    if c_ % 4:
        # The last slice of every pixel holds c % 4 real lanes followed by zeros.
        last = lanes.reshape(b_, slices(c_), h_ * w_, 4)[:, -1]
        assert np.all(last[..., c_ % 4:] == 0) and np.all(last[..., : c_ % 4] >= 1)


@pytest.mark.parametrize("channels,expected", [(1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3), (13, 4)])
def test_slices(channels: int, expected: int) -> None:
    assert slices(channels) == expected


def test_from_phwc4_ignores_trailing_storage_and_garbage_padding() -> None:
    # A GPU buffer may be larger than the tensor, and padding lanes may hold anything after a kernel runs.
    shape = (2, 3, 5)
    x = logical(shape)
    flat = to_phwc4(x)
    dirty = np.concatenate([flat, np.full(17, 99.0, np.float32)])
    b_, h_, w_, c_ = to_bhwc(shape)
    pad = np.ones(flat.size, bool)
    for b, h, w, c in itertools.product(range(b_), range(h_), range(w_), range(c_)):
        pad[phwc4_index(shape, b, h, w, c)] = False
    dirty[: flat.size][pad] = -7.0
    np.testing.assert_array_equal(from_phwc4(dirty, shape), x)


def test_integer_and_bool_inputs_convert_to_float() -> None:
    x = np.arange(-3, 3, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(from_phwc4(to_phwc4(x), (2, 3)), x.astype(np.float32))
    mask = np.array([True, False, True])
    np.testing.assert_array_equal(to_phwc4(mask), [1, 0, 1, 0])


def test_rank_5_has_no_layout() -> None:
    with pytest.raises(ValueError, match="rank 5"):
        to_bhwc((1, 2, 3, 4, 5))
    with pytest.raises(ValueError):
        to_phwc4(np.zeros((1, 1, 1, 1, 1), np.float32))


def test_zero_sized_tensor() -> None:
    shape = (1, 0, 3, 5)
    assert phwc4_elements(shape) == 0
    assert to_phwc4(np.zeros(shape, np.float32)).size == 0
    assert from_phwc4(np.zeros(0, np.float32), shape).shape == shape
