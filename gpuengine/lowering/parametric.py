"""One compile for many shapes: a kernel's WGSL with the numbers that depend on symbolic sizes read from a small
buffer instead of baked in.

Where Rank and Dimension Propagation (model/symbolic.py) leaves a dimension symbolic, the engine renders each
dispatch at two sizes of the symbols (the run's and a probe's). The two texts agree everywhere except in the
numbers the sizes decide (extents, strides, plane sizes, padding, scale factors, grid sizes): those are hoisted
into `gpe_dims`, a read-only storage buffer bound after the kernel's own bindings, and the rest stays baked (the
numbers that did not change: channels, kernel sizes, strides of static dimensions). The parametric text compiles
once; a later size's dispatch whose rendered text matches it number for number outside the hoisted places (the
same decomposition, the same fusions) runs on that pipeline with its own numbers in its own small buffer, so a
new input size compiles nothing. A text that does not match (another decomposition chosen for the size: the
shape classes of SoD²'s multi-version code) compiles as before and is a version of its own.

Numbers are hoisted only where WGSL takes a run-time value: not in `const` or `override` declarations, array
types, `@workgroup_size` or `case` selectors (a pair whose numbers differ there is not parametric). u32 literals
read the buffer as u32, i32 literals (`3i` and unsuffixed integers) bitcast it, floats are stored as f32 bits.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

import numpy as np

from . import codegen
from .kernels.base import KernelSpec

BUFFER = "gpe_dims"
# a number literal: not part of an identifier (vec4, x0) or of a longer number
_NUMBER = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+)([uifh]?)(?![\w.])")
_FIXED_CONTEXTS = ("const ", "override ", "array<", "@workgroup_size", "case ", "var<workgroup>")


@functools.lru_cache(maxsize=128)  # a version's sampled texts (about 50) at a time
def _split(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """text as its pieces between numbers, and the numbers (digits, suffix); remembered (the symbolic plan splits
    each sampled text twice, hoisting and reading it). Callers never change the lists."""
    pieces: list[str] = []
    numbers: list[tuple[str, str]] = []
    last = 0
    for m in _NUMBER.finditer(text):
        pieces.append(text[last:m.start()])
        numbers.append((m.group(1), m.group(2)))
        last = m.end()
    pieces.append(text[last:])
    return pieces, numbers


def _is_float(digits: str) -> bool:
    return any(c in digits for c in ".eE")


def _line_of(pieces: list[str], k: int) -> str:
    """The text of the line the k-th number is on, up to the number (enough to see its context)."""
    before = "".join(pieces[:k + 1])
    return before[before.rfind("\n") + 1:]


@dataclass
class ParametricKernel:
    """A kernel's text with some numbers hoisted into gpe_dims (binding `binding`), and how to read a later
    rendering's numbers for those places."""

    shader: str
    workgroup: tuple[int, int, int]  # a later size's dispatch is rendered with this workgroup size to match
    decomposition: object | None  # ... and in this decomposition (Decomposition) where the kernel has them
    source: str  # the parametric WGSL
    binding: int
    pieces: list[str]
    numbers: list[tuple[str, str]]  # the baked numbers (the hoisted places hold the first text's)
    hoisted: list[int]  # positions in `numbers` read from gpe_dims, in buffer order
    pipeline: object | None = None
    unbaked: bool = False  # made from the specs' `unbaked` form: a later size's spec is rendered so too

    def values(self, source: str) -> np.ndarray | None:
        """gpe_dims' contents for `source` (another size's rendering of the same kernel), or None when it differs
        from this kernel anywhere but in the hoisted numbers."""
        pieces, numbers = _split(source)
        if pieces != self.pieces or len(numbers) != len(self.numbers):
            return None
        hoisted = set(self.hoisted)
        for k, (number, baked) in enumerate(zip(numbers, self.numbers)):
            if k not in hoisted and number != baked:
                return None
            if k in hoisted and number[1] != baked[1]:
                return None
        return np.array([_bits(*numbers[k]) for k in self.hoisted], np.uint32)


def _bits(digits: str, suffix: str) -> int:
    if _is_float(digits) or suffix in ("f", "h"):
        return int(np.array([float(digits)], np.float32).view(np.uint32)[0])
    return int(digits) & 0xFFFFFFFF


def _read(index: int, digits: str, suffix: str) -> str:
    word = f"{BUFFER}[{index}]"
    if _is_float(digits) or suffix == "f":
        return f"bitcast<f32>({word})"
    if suffix == "h":
        return f"f16(bitcast<f32>({word}))"
    if suffix == "u":
        return word
    return f"bitcast<i32>({word})"


def hoist(shader: str, workgroup: tuple[int, int, int], decomposition: object | None, first: str,
          others: list[str], binding: int) -> ParametricKernel | None:
    """The parametric kernel of renderings of one dispatch at different sizes: `first` with every number hoisted
    that differs in one of `others` (an other differing in more than numbers is left out: another version).
    None when a number differs in kind or in a place that must stay a constant, or when nothing differs."""
    pieces, numbers = _split(first)
    varying: set[int] = set()
    for second in others:
        other_pieces, other_numbers = _split(second)
        if other_pieces != pieces or len(numbers) != len(other_numbers):
            continue
        for k, (a, b) in enumerate(zip(numbers, other_numbers)):
            if a == b:
                continue
            if a[1] != b[1] or _is_float(a[0]) != _is_float(b[0]):
                return None
            line = _line_of(pieces, k).lstrip()
            if any(context in line for context in _FIXED_CONTEXTS):
                return None
            varying.add(k)
    if not varying:
        return None
    hoisted = sorted(varying)
    slot = {k: i for i, k in enumerate(hoisted)}
    out = [pieces[0]]
    for k, number in enumerate(numbers):
        out.append(_read(slot[k], *number) if k in slot else number[0] + number[1])
        out.append(pieces[k + 1])
    source = "".join(out) + f"\n@group(0) @binding({binding}) var<storage, read> {BUFFER}: array<u32>;\n"
    return ParametricKernel(shader, tuple(workgroup), decomposition, source, binding,  # type: ignore[arg-type]
                            pieces, numbers, hoisted)


def unbaked(spec: KernelSpec) -> KernelSpec | None:
    """The spec with its small constants in buffers instead of the text (codegen.is_baked), when it has any: a
    table that depends on the sizes (a resize's source coordinates) then changes the buffer, not the text."""
    if not any(codegen.is_baked(b) for b in spec.bindings):
        return None
    return dataclasses.replace(spec, bindings=[dataclasses.replace(b, bake=False) if codegen.is_baked(b) else b
                                               for b in spec.bindings])


__all__ = ["BUFFER", "ParametricKernel", "hoist", "unbaked"]
