"""Shape rules (model/shapes.py) without a GPU: value-dependent shapes are known at allocation, the rules reproduce
every shape the converter declared, and unchanged ops are not recomputed (tests/api/test_shapes.py: resizing on the
GPU against LiteRT)."""

from __future__ import annotations

import pytest
from builders import fcn_model
from helpers import SHARED_MODELS

from gpuengine import zoo
from gpuengine.model.reader import read_model
from gpuengine.model.shapes import propagate

TOY_LLM = SHARED_MODELS / "toy_decoder_kv.tflite"


def test_value_dependent_shapes_are_known_at_allocation() -> None:
    graph = read_model(fcn_model()).main
    done = propagate(graph, {graph.inputs[0]: (1, 20, 14, 3)})
    names = {t.name: tuple(t.shape) for t in done.graph.tensors}
    assert not done.runtime
    # the builder names an op's outputs "<code>_<op index>_<output>": op 4 is the RESIZE, op 9 the RESHAPE
    assert [op.code for op in graph.ops[4:10:5]] == ["RESIZE_BILINEAR", "RESHAPE"]
    assert names["conv_2d_0_0"] == (1, 10, 7, 8)
    assert names["resize_bilinear_4_0"] == (1, 20, 14, 8)  # RESIZE to sizes sliced from SHAPE(x)
    assert names["conv_2d_5_0"] == (1, 20, 14, 2)
    assert names["reshape_9_0"] == (1, 10 * 7 * 8)  # RESHAPE to PACK(SHAPE(d)[0], -1)
    assert done.values[graph.ops[3].outputs[0]].tolist() == [20, 14]  # the SLICE of SHAPE(x)


@pytest.mark.parametrize("name", ["tiny", "mobilenet_v2", "mobilenet_v3_small"])
def test_rules_reproduce_every_declared_shape(name: str) -> None:
    """Deriving every op's shapes again (not only what changed) gives the converter's own shapes."""
    model = read_model(zoo.get(name))
    graph = model.main
    done = propagate(graph, {t: graph.tensors[t].shape for t in graph.inputs}, model, recompute_all=True)
    assert done.recomputed == len(graph.ops) and not done.runtime
    assert [t.shape for t in done.graph.tensors] == [t.shape for t in graph.tensors]


@pytest.mark.skipif(not TOY_LLM.exists(), reason="the toy decoder is not in ../shared/models")
def test_rules_reproduce_the_toy_decoder_with_its_composites() -> None:
    model = read_model(TOY_LLM)
    for graph in model.subgraphs:
        done = propagate(graph, {t: graph.tensors[t].shape for t in graph.inputs}, model, recompute_all=True)
        assert not done.runtime
        assert [t.shape for t in done.graph.tensors] == [t.shape for t in graph.tensors]


def test_unchanged_ops_are_not_recomputed() -> None:
    graph = read_model(zoo.get("mobilenet_v2")).main
    done = propagate(graph, {t: graph.tensors[t].shape for t in graph.inputs})
    assert done.recomputed == 0
