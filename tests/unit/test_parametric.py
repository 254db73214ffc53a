"""Parametric kernels (lowering/parametric.py), on WGSL text alone: which numbers are hoisted into gpe_dims, how
they are read, what a later size's text must keep equal, and where a number must stay baked."""

from __future__ import annotations

import numpy as np

from gpuengine.lowering.parametric import BUFFER, hoist

KERNEL = """fn main() {
  let oi = (ob * {S}u + os) * {H}u + oy;
  let iy = i32(oy * 2u) - {PAD};
  let scale = {SCALE};
  let c = vec4<f32>(1.0, 2.0, 3.0, 4.0);
}"""


def _text(s: int, h: int, pad: int, scale: float) -> str:
    return KERNEL.replace("{S}", str(s)).replace("{H}", str(h)).replace("{PAD}", str(pad)) \
        .replace("{SCALE}", repr(scale))


def test_the_numbers_that_differ_are_hoisted_with_their_types() -> None:
    kernel = hoist("k", (8, 1, 1), None, _text(2, 8, 1, 0.5), [_text(2, 15, 0, 0.25), _text(2, 45, 1, 0.125)], 3)
    assert kernel is not None
    assert f"* {BUFFER}[0] + oy" in kernel.source  # H: a u32 literal, read as it is
    assert f"- bitcast<i32>({BUFFER}[1])" in kernel.source  # the padding: an abstract (i32) literal
    assert f"let scale = bitcast<f32>({BUFFER}[2])" in kernel.source  # a float as its f32 bits
    assert "(ob * 2u + os)" in kernel.source and "vec4<f32>(1.0, 2.0, 3.0, 4.0)" in kernel.source  # unchanged: baked
    assert f"@group(0) @binding(3) var<storage, read> {BUFFER}: array<u32>;" in kernel.source
    values = kernel.values(_text(2, 30, 1, 0.75))
    assert values is not None
    assert values.tolist() == [30, 1, int(np.array([0.75], np.float32).view(np.uint32)[0])]


def test_a_later_text_must_match_outside_the_hoisted_numbers() -> None:
    kernel = hoist("k", (8, 1, 1), None, _text(2, 8, 1, 0.5), [_text(2, 15, 0, 0.25)], 3)
    assert kernel is not None
    assert kernel.values(_text(3, 30, 1, 0.5)) is None  # S was baked (it did not change): another version
    assert kernel.values(_text(2, 30, 1, 0.5).replace("oy;", "oy + 1u;")) is None  # other text
    assert kernel.values(_text(2, 30, 1, 0.5).replace("30u", "30i")) is None  # another literal kind


def test_numbers_in_constant_places_are_never_hoisted() -> None:
    def text(n: int) -> str:
        return f"var<private> tab: array<vec4<f32>, {n}>;\nfn main() {{ let x = {n}u; }}"

    assert hoist("k", (8, 1, 1), None, text(4), [text(6)], 1) is None
    assert hoist("k", (8, 1, 1), None, "const N = 4u;", ["const N = 6u;"], 1) is None
    assert hoist("k", (8, 1, 1), None, "@compute @workgroup_size(8, 1, 1)", ["@compute @workgroup_size(16, 1, 1)"],
                 1) is None


def test_identical_or_structurally_different_texts_give_nothing() -> None:
    assert hoist("k", (8, 1, 1), None, _text(2, 8, 1, 0.5), [_text(2, 8, 1, 0.5)], 3) is None
    assert hoist("k", (8, 1, 1), None, "let a = x0 + 1u;", ["let a = x1 + 1u;"], 1) is None  # identifiers differ
