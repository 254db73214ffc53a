"""Which bytes a session swap copies: the cache positions [start, end) of a row-major f32 cache buffer as byte
ranges, for the three layouts litert-torch writes ([1, T, N, H], [1, N, T, H], a transposed [1, N, H, T]), checked
against numpy slicing."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.llm.engine import position_ranges


@pytest.mark.parametrize(("shape", "axis"), [((1, 16, 2, 8), 1), ((1, 3, 16, 8), 2), ((1, 2, 8, 16), 3)],
                         ids=["btnh", "bnth", "transposed"])
def test_ranges_are_the_positions(shape: tuple[int, ...], axis: int) -> None:
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    flat = data.reshape(-1).view(np.uint8)
    for start, end in ((0, 16), (3, 7), (15, 16)):
        ranges = position_ranges(shape, 16, start, end)
        got = np.concatenate([flat[o:o + n] for o, n in ranges]).view(np.float32)
        want = np.moveaxis(np.take(data, range(start, end), axis=axis), axis, -1)
        assert sorted(got.tolist()) == sorted(want.reshape(-1).tolist())
        assert sum(n for _, n in ranges) == data.size * 4 * (end - start) // 16
    assert position_ranges(shape, 16, 5, 5) == []


def test_ambiguous_or_many_ranges_copy_whole() -> None:
    assert position_ranges((1, 16, 16, 8), 16, 0, 4) is None  # two axes of 16 positions
    assert position_ranges((1, 8, 64, 16), 16, 0, 4) is None  # 512 ranges: the whole buffer instead
