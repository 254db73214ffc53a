"""RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR against LiteRT: up- and downscaling, non-integer scales, every
align_corners / half_pixel_centers combination TFLite accepts, odd channel counts."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert
from hypothesis import given
from hypothesis import strategies as st

from gpuengine.lowering.kernels import registry
from gpuengine.lowering.kernels.resize import nearest_table
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model

OPS = ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"]


def resize_model(code: str, shape: tuple[int, int, int, int], size: tuple[int, int], align_corners: bool,
                 half_pixel: bool) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.op(code, [x, mb.const("size", np.array(size, np.int32))], (shape[0], *size, shape[3]),
              {"align_corners": align_corners, "half_pixel_centers": half_pixel})
    mb.output(y)
    return mb.build()


@st.composite
def resize_case(draw):
    code = draw(st.sampled_from(OPS))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 9)), draw(st.integers(1, 9)),
             draw(st.sampled_from([1, 3, 4, 5, 7, 9])))
    size = (draw(st.integers(1, 17)), draw(st.integers(1, 17)))
    align, half = draw(st.sampled_from([(False, False), (True, False), (False, True), (True, True)]))
    if code == "RESIZE_BILINEAR" and align and half:
        half = False  # rejected by TFLite's bilinear kernel; see the fallback test
    return code, shape, size, align, half


@given(resize_case())
def test_resize_random(case):
    code, shape, size, align, half = case
    assert_matches_litert(resize_model(code, shape, size, align, half))


@pytest.mark.parametrize("code", OPS)
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("shape,size", [((1, 4, 6, 3), (7, 11)),  # upscale, scale 4/7 and 6/11
                                        ((1, 13, 10, 5), (5, 3)),  # downscale, non-integer
                                        ((2, 3, 3, 8), (6, 9))])  # integer upscale
def test_resize_grid(code, flags, shape, size):
    assert_matches_litert(resize_model(code, shape, size, *flags))


def test_nearest_rounds_half_away_from_zero():
    """align_corners 4 -> 7 samples at exactly 0.5, 1.5, 2.5: TFLite rounds away from zero, not to even."""
    assert nearest_table(4, 7, True, False)[:, 0].tolist() == [0, 1, 1, 2, 2, 3, 3]
    assert_matches_litert(resize_model("RESIZE_NEAREST_NEIGHBOR", (1, 4, 4, 3), (7, 7), True, False))
    assert_matches_litert(resize_model("RESIZE_NEAREST_NEIGHBOR", (1, 4, 5, 7), (7, 2), True, True))


def test_bilinear_align_and_half_pixel_falls_back():
    model = resize_model("RESIZE_BILINEAR", (1, 4, 4, 3), (6, 6), True, True)
    graph = read_model(model).main
    assert "half_pixel_centers" in registry.check(graph.ops[0], graph)
    assert_matches_litert(model, all_gpu=False)
