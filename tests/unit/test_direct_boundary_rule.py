"""Boundary converters that would move nothing are not dispatched (lowering/dispatches.direct_boundaries): which
shapes, precisions and tensors qualify, checked against the PHWC4 layout itself and on planned dispatches."""

from __future__ import annotations

import numpy as np
import pytest
from builders import boundary_model

from gpuengine.latency.target import named
from gpuengine.lowering.dispatches import dispatch_macs
from gpuengine.lowering.layout import phwc4_elements, stored_as_bhwc, to_bhwc, to_phwc4
from gpuengine.options import EngineOptions
from gpuengine.planning import planned_dispatches

SHAPES = [(), (1,), (3,), (4,), (12,), (1, 1), (1, 3), (1, 8), (3, 8), (3, 6), (2, 1), (1, 2, 4), (1, 2, 8),
          (1, 1, 3), (1, 2, 2, 4), (2, 3, 5, 4), (1, 2, 2, 8), (1, 1, 1, 7), (1, 2, 2, 3), (2, 1, 1, 12), (1, 0)]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_rule_is_the_layout(shape):
    """A shape qualifies exactly when its PHWC4 array is its BHWC values (then zero padding, where allowed)."""
    size = int(np.prod(shape, dtype=np.int64))
    values = np.arange(1, size + 1, dtype=np.float32).reshape(shape)
    stored = to_phwc4(values)
    same = size > 0 and np.array_equal(stored[:size], values.reshape(-1)) and not stored[size:].any()
    assert stored_as_bhwc(shape) == same
    assert stored_as_bhwc(shape, padded=False) == (same and stored.size == size)


def test_rule_cases():
    assert stored_as_bhwc((1, 1)) and stored_as_bhwc((1,)) and stored_as_bhwc(())  # a token, a position
    assert stored_as_bhwc((1, 1, 49152), padded=False)  # a decode step's logits
    assert stored_as_bhwc((5, 8), padded=False)  # one pixel per batch, whole slices
    assert stored_as_bhwc((1, 1, 150)) and not stored_as_bhwc((1, 1, 150), padded=False)  # 152 channels stored
    assert not stored_as_bhwc((2, 150))  # each batch's padding lies between the values
    assert not stored_as_bhwc((1, 1), padded=False)  # a lone pixel's vec4 holds padding
    assert not stored_as_bhwc((1, 224, 224, 3))


def converted(precision: str, signature: tuple[int, ...] | None = None) -> tuple[set[str], set[str]]:
    """Names of the inputs and outputs a converter dispatch reads or writes, planned without a GPU."""
    from gpuengine.model.reader import read_model

    graph = read_model(boundary_model(signature)).main
    plan, (specs,) = planned_dispatches(graph, EngineOptions(precision=precision), named("discrete"))
    names = {t.index: t.name.split("_")[0] for t in plan.graph.tensors}  # an op's output: "y_2_0"
    into = {names[s.bindings[0].tensor] for s in specs if s.shader == "bhwc_to_phwc4"}
    out_of = {names[s.bindings[1].tensor] for s in specs if s.shader == "phwc4_to_bhwc"}
    raw_read = {names[b.tensor] for s in specs if s.shader not in ("bhwc_to_phwc4", "phwc4_to_bhwc")
                for b in s.bindings if b.raw}
    assert raw_read.isdisjoint(into | out_of)  # a tensor is converted or bound directly, never both
    return into, out_of


def test_fp32_converts_only_what_changes_layout():
    into, out_of = converted("fp32")
    assert into == {"img"} and out_of == {"z", "p"}


def test_fp16_keeps_converting_float_tensors():
    """f16 storage is not the host's f32 bytes: only the int32 inputs (stored f32 in every precision) go direct."""
    into, out_of = converted("fp16")
    assert into == {"img", "x"} and out_of == {"z", "p", "y", "w", "v"}


def test_symbolic_shapes_keep_their_converter():
    """A resizable input's qualification would change with its size (one plan serves many: symbolic_plan.py)."""
    into, _ = converted("fp32", (1, -1))
    assert "x" in into and "ids" not in into


def test_a_gathers_elements_read_are_its_rows():
    """inspect's MACs of an EMBEDDING_LOOKUP: the row it copies (and its index), not the whole table."""
    from gpuengine.model.reader import read_model

    graph = read_model(boundary_model()).main
    plan, (specs,) = planned_dispatches(graph, EngineOptions(), named("discrete"))
    (gather,) = [s for s in specs if "EMBEDDING_LOOKUP" in s.label]
    table = next(t for t in plan.graph.tensors if t.name == "table")
    assert phwc4_elements(table.shape) == 128 and to_bhwc(table.shape) == (16, 1, 1, 8)
    # the row's 8 values and the id, where the whole 16-row table was counted before
    assert dispatch_macs(gather, plan.graph) < table.size
    assert dispatch_macs(gather, plan.graph) >= 8
