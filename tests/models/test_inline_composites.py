"""inline_composites: STABLEHLO_COMPOSITE ops replaced by their decomposition subgraphs, so their ops run on
the GPU like any other; an unknown composite runs its decomposition, one that cannot be inlined stays whole."""

from __future__ import annotations

import numpy as np
import pytest
from flatbuffers import flexbuffers
from helpers import assert_matches_litert

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions
from gpuengine.passes.inline_composites import inline_composites
from gpuengine.passes.pipeline import run_passes
from gpuengine.planning import plan_graph

SHAPE = (1, 2, 3, 8)
NO_ATTRIBUTES = list(flexbuffers.Dumps({}))  # LiteRT requires composite_attributes, an empty flexbuffer map will do


def decomposition(name: str, passthrough: bool = False, inner: int | None = None) -> ModelBuilder:
    """y = tanh(a * 0.5 + b) (a composite that no engine knows by name); `inner`: the subgraph index of a
    composite this one calls for its ADD, `passthrough`: the output is input a itself (no op writes it)."""
    sub = ModelBuilder(name)
    a, b = sub.input("a", SHAPE), sub.input("b", SHAPE)
    if passthrough:
        sub.op("TANH", [b], SHAPE)
        sub.output(a)
        return sub
    half = sub.op("MUL", [a, sub.const("half", np.float32(0.5))], SHAPE)
    if inner is None:
        added = sub.op("ADD", [half, b], SHAPE)
    else:
        added = sub.op("STABLEHLO_COMPOSITE", [half, b], SHAPE,
                       {"name": "test.add", "decomposition_subgraph_index": inner, "version": 0,
                        "composite_attributes": NO_ATTRIBUTES})
    sub.output(sub.op("TANH", [added], SHAPE))
    return sub


def add_decomposition() -> ModelBuilder:
    sub = ModelBuilder("test.add.impl")
    a, b = sub.input("a", SHAPE), sub.input("b", SHAPE)
    sub.output(sub.op("ADD", [a, b], SHAPE))
    return sub


def composite_model(passthrough: bool = False, nested: bool = False) -> bytes:
    mb = ModelBuilder()
    x, y = mb.input("x", SHAPE), mb.input("y", SHAPE)
    inner = mb.add_subgraph(add_decomposition()) if nested else None
    index = mb.add_subgraph(decomposition("test.unknown.impl", passthrough, inner))
    relu = mb.op("RELU", [x], SHAPE)
    out = mb.op("STABLEHLO_COMPOSITE", [relu, y], SHAPE,
                {"name": "test.unknown", "decomposition_subgraph_index": index, "version": 0,
                 "composite_attributes": NO_ATTRIBUTES})
    mb.output(mb.op("MUL", [out, y], SHAPE))
    return mb.build()


def test_unknown_composite_is_inlined_and_runs_on_the_gpu():
    model = read_model(composite_model())
    inlined = inline_composites(model.main, model)
    assert [op.code for op in inlined.ops] == ["RELU", "MUL", "ADD", "TANH", "MUL"]
    # the decomposition's inputs and output are the composite's tensors; its inner tensors are appended
    composite = model.main.ops[1]
    assert inlined.ops[1].inputs[0] == composite.inputs[0] and inlined.ops[2].inputs[1] == composite.inputs[1]
    assert inlined.ops[3].outputs == composite.outputs
    assert len(inlined.tensors) == len(model.main.tensors) + 3  # the constant, MUL's and ADD's outputs
    assert all(t.index == i for i, t in enumerate(inlined.tensors))
    assert model.main.ops[1].code == "STABLEHLO_COMPOSITE"  # the model's graph is untouched
    plan = plan_graph(model.main, EngineOptions(), model)
    assert all(reason is None for reason in plan.support.values()) and plan.ops_gpu == len(plan.graph.ops)
    assert_matches_litert(composite_model())


def test_nested_composites_are_inlined():
    model = read_model(composite_model(nested=True))
    assert [op.code for op in inline_composites(model.main, model).ops] == ["RELU", "MUL", "ADD", "TANH", "MUL"]
    assert_matches_litert(composite_model(nested=True))


def test_inlined_with_passes_off():
    model = read_model(composite_model())
    assert "STABLEHLO_COMPOSITE" not in [op.code for op in run_passes(model.main, optimize=False, model=model).ops]
    assert_matches_litert(composite_model(), optimize=False)


def test_without_the_model_nothing_is_inlined():
    model = read_model(composite_model())
    assert inline_composites(model.main, None) is model.main


def test_composite_that_does_not_fit_stays_whole_and_runs_on_litert():
    """A decomposition whose output is its input (no op writes it) is not inlined; LiteRT runs the composite."""
    model = read_model(composite_model(passthrough=True))
    assert [op.code for op in inline_composites(model.main, model).ops] == ["RELU", "STABLEHLO_COMPOSITE", "MUL"]
    plan = plan_graph(model.main, EngineOptions(), model)
    assert plan.support[1] is not None and "STABLEHLO_COMPOSITE" in plan.unsupported
    assert_matches_litert(composite_model(passthrough=True), all_gpu=False)


@pytest.mark.parametrize("field,value", [("decomposition_subgraph_index", 7)])
def test_composite_with_a_bad_reference_is_left_to_the_validator(field, value):
    """inline_composites never raises on a reference it cannot follow: it leaves the op (the validator names it)."""
    model = read_model(composite_model())
    graph = model.main.copy()
    graph.ops[1].options.fields[field] = value
    assert [op.code for op in inline_composites(graph, model).ops][1] == "STABLEHLO_COMPOSITE"
