"""passes/fuse_elementwise_tree.py: activations written as ops over one tensor (swish, hard-swish, x*x, GELU) become
one ELEMENTWISE_TREE op, which runs in the epilogue of the kernel producing x, or as one dispatch without one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import assert_matches_litert, random_inputs, relative_error, run_gpuengine

from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Graph
from gpuengine.model.ops import ELEMENTWISE_TREE as TREE
from gpuengine.model.ops import TREE_OPTION
from gpuengine.model.reader import read_model
from gpuengine.passes import pipeline
from gpuengine.passes.fuse_elementwise_tree import fuse_elementwise_tree

CONVERTERS = ("bhwc_to_phwc4", "phwc4_to_bhwc")


def _scalar(mb: ModelBuilder, value: float) -> int:
    return mb.const(f"k{len(mb.ops)}", np.array(value, np.float32))


def _swish(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
    return mb.op("MUL", [x, mb.op("LOGISTIC", [x], shape)], shape)


def _swish_swapped(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
    return mb.op("MUL", [mb.op("LOGISTIC", [x], shape), x], shape)


def _hard_swish_div(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
    """x * RELU6(x + 3) / 6"""
    r = mb.op("RELU6", [mb.op("ADD", [x, _scalar(mb, 3.0)], shape)], shape)
    return mb.op("DIV", [mb.op("MUL", [x, r], shape), _scalar(mb, 6.0)], shape)


def _hard_swish_mul(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
    """x * (RELU6(x + 3) * (1/6)), as Keras writes it"""
    r = mb.op("RELU6", [mb.op("ADD", [x, _scalar(mb, 3.0)], shape)], shape)
    return mb.op("MUL", [x, mb.op("MUL", [r, _scalar(mb, 1.0 / 6.0)], shape)], shape)


def _square(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
    return mb.op("MUL", [x, x], shape)


def _gelu(cube: str) -> Callable[[ModelBuilder, int, tuple[int, ...]], int]:
    """0.5 * x * (1 + TANH(0.7978845608 * (x + 0.044715 * x^3))), x^3 as POW(x, 3) or MUL(MUL(x, x), x)."""

    def build(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
        if cube == "pow":
            x3 = mb.op("POW", [x, _scalar(mb, 3.0)], shape)
        else:
            x3 = mb.op("MUL", [mb.op("MUL", [x, x], shape), x], shape)
        inner = mb.op("ADD", [x, mb.op("MUL", [x3, _scalar(mb, 0.044715)], shape)], shape)
        t = mb.op("TANH", [mb.op("MUL", [inner, _scalar(mb, 0.7978845608)], shape)], shape)
        half = mb.op("MUL", [x, _scalar(mb, 0.5)], shape)
        return mb.op("MUL", [half, mb.op("ADD", [t, _scalar(mb, 1.0)], shape)], shape)

    return build


def _log_div(mb: ModelBuilder, x: int, shape: tuple[int, ...]) -> int:
    """LOG(x*x) + x / (x*x) + per-channel constant: -inf and 0/0 in the padding lanes unless they are masked."""
    sq = mb.op("MUL", [x, x], shape)
    s = mb.op("ADD", [mb.op("LOG", [sq], shape), mb.op("DIV", [x, sq], shape)], shape)
    channel = np.linspace(-1.0, 1.0, shape[-1]).astype(np.float32)
    return mb.op("SUB", [s, mb.const(f"c{len(mb.ops)}", channel)], shape)


# name -> (builder, the tree's op codes in graph order)
PATTERNS: dict[str, tuple[Callable[[ModelBuilder, int, tuple[int, ...]], int], list[str]]] = {
    "swish": (_swish, ["LOGISTIC", "MUL"]),
    "swish_swapped": (_swish_swapped, ["LOGISTIC", "MUL"]),
    "hard_swish_div": (_hard_swish_div, ["ADD", "RELU6", "MUL", "DIV"]),
    "hard_swish_mul": (_hard_swish_mul, ["ADD", "RELU6", "MUL", "MUL"]),
    "square": (_square, ["MUL"]),
    "gelu_pow": (_gelu("pow"), ["POW", "MUL", "ADD", "MUL", "TANH", "MUL", "ADD", "MUL"]),
    "gelu_mul": (_gelu("mul"), ["MUL", "MUL", "MUL", "ADD", "MUL", "TANH", "MUL", "ADD", "MUL"]),
    "log_div": (_log_div, ["MUL", "LOG", "DIV", "ADD", "SUB"]),
}


def _conv(mb: ModelBuilder, x: int, shape: tuple[int, ...], oc: int, k: int, seed: int) -> int:
    """A SAME conv with weights scaled so its outputs have a standard deviation of ~1.5 for inputs in [-1, 1]."""
    rng = np.random.default_rng(seed)
    c = shape[-1]
    w = rng.standard_normal((oc, k, k, c)).astype(np.float32) * np.float32(2.6 / np.sqrt(k * k * c))
    b = rng.standard_normal(oc).astype(np.float32) * np.float32(0.3)
    ins = [x, mb.const(f"w{seed}", w), mb.const(f"b{seed}", b)]
    return mb.op("CONV_2D", ins, (*shape[:3], oc), {"padding": "SAME", "stride_h": 1, "stride_w": 1})


def _model(pattern: str, c: int = 8, producer: bool = True, reader: bool = False) -> bytes:
    """x -> [3x3 conv ->] tree -> output [-> 3x3 conv -> output]. A 3x3 reader has no prologue and reads the
    padding lanes (with zero weights), so NaN or inf there would show in its output."""
    shape = (1, 5, 6, c)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    h = _conv(mb, x, shape, c, 3, seed=1) if producer else x
    y = PATTERNS[pattern][0](mb, h, shape)
    mb.output(_conv(mb, y, shape, 3, 3, seed=2) if reader else y)
    return mb.build()


def _dispatches(it: Any) -> list[Any]:
    return [d.spec for p in it.compiled.programs for d in getattr(p, "dispatches", [])
            if d.spec.shader not in CONVERTERS]


def _check_runs(model: bytes) -> tuple[Any, Any]:
    """Fused and unfused runs both match LiteRT and agree with each other; returns both interpreters."""
    feeds = random_inputs(model)
    fused = assert_matches_litert(model, feeds)
    plain = assert_matches_litert(model, feeds, optimize=False)
    for d in fused.get_output_details():
        got, ref = fused.get_tensor(d["index"]), plain.get_tensor(d["index"])
        assert relative_error(got, ref) <= 1e-5
    return fused, plain


def _apply(model: bytes) -> tuple[Graph, Graph]:
    graph = read_model(model).main
    ops_before = [(o.code, tuple(o.inputs), tuple(o.outputs)) for o in graph.ops]
    out = fuse_elementwise_tree(graph)
    assert [(o.code, tuple(o.inputs), tuple(o.outputs)) for o in graph.ops] == ops_before, "input graph mutated"
    return graph, out


def _tree_codes(graph: Graph) -> list[list[str]]:
    return [[s.op.code for s in op.opt(TREE_OPTION)] for op in graph.ops if op.code == TREE]


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_tree_becomes_one_op_in_the_producers_epilogue(pattern: str) -> None:
    c = 5 if pattern in ("log_div", "hard_swish_div") else 8  # odd channels: padding lanes
    model = _model(pattern, c)
    before, after = _apply(model)
    steps = PATTERNS[pattern][1]
    assert len(after.ops) == len(before.ops) - len(steps) + 1
    assert [o.code for o in after.ops] == ["CONV_2D", TREE]
    assert _tree_codes(after) == [steps]
    tree = after.ops[1]
    assert tree.inputs[0] == before.ops[0].outputs[0] and tree.outputs == before.outputs
    assert all(after.tensors[t].data is not None for t in tree.inputs[1:])

    fused, plain = _check_runs(model)
    assert [o.code for o in fused.compiled.plan.graph.ops] == ["CONV_2D", TREE]
    (conv,) = _dispatches(fused)  # the whole tree runs in the conv's epilogue
    assert conv.shader.startswith("conv2d") and conv.label.endswith("+" + "+".join(steps))
    assert [fused.compiled.plan.graph.ops[i].code for i in conv.ops] == ["CONV_2D", TREE]
    assert fused.compiled.dispatches == 3 and plain.compiled.dispatches == 3 + len(steps)


@pytest.mark.parametrize("c", [5, 7])
def test_padding_lanes_stay_zero_before_a_reader(c: int) -> None:
    """LOG(0) and 0 / 0 in the padding lanes of a tree in the producer's epilogue must not reach the 3x3 conv
    reading them."""
    model = _model("log_div", c, reader=True)
    fused, _ = _check_runs(model)
    specs = _dispatches(fused)
    assert len(specs) == 2 and all(d.shader.startswith("conv2d") for d in specs)
    assert specs[0].label.endswith("+MUL+LOG+DIV+ADD+SUB") and len(specs[0].ops) == 2


def test_tree_on_a_model_input_is_one_dispatch() -> None:
    """No producer can host it: the whole tree is one elementwise dispatch (with a 3x3 conv reading its padding
    lanes, which must stay zero)."""
    model = _model("log_div", 7, producer=False, reader=True)
    _, after = _apply(model)
    assert [o.code for o in after.ops] == [TREE, "CONV_2D"]
    fused, plain = _check_runs(model)
    standalone = [d for d in _dispatches(fused) if d.shader == "elementwise"]
    assert [d.label for d in standalone] == [f"{TREE}(MUL+LOG+DIV+ADD+SUB)"]
    assert len(_dispatches(fused)) == 2 and len(_dispatches(plain)) == 6


def test_tree_on_a_model_input_read_by_a_1x1_conv_is_its_prologue() -> None:
    """fuse_input_expression runs first: a 1x1 conv evaluates the swish while loading, with no dispatch for it."""
    shape = (1, 5, 6, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    mb.output(_conv(mb, _swish(mb, x, shape), shape, 4, 1, seed=2))
    fused, _ = _check_runs(mb.build())
    (conv,) = fused.compiled.plan.graph.ops
    assert [s.op.code for s in conv.opt("prologue")] == ["LOGISTIC", "MUL"]
    assert len(_dispatches(fused)) == 1


def test_without_the_pass_each_op_is_a_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same model with every other pass and fusion on: swish costs a dispatch of its own (the MUL fuses into
    the LOGISTIC's epilogue), and the conv's output is written and read back."""
    model = _model("swish")
    feeds = random_inputs(model)
    _, with_pass = run_gpuengine(model, feeds)
    monkeypatch.setattr(pipeline, "OPTIONAL", [p for p in pipeline.OPTIONAL if p is not fuse_elementwise_tree])
    _, without = run_gpuengine(model, feeds)
    assert [d.label.split(" ")[0] for d in _dispatches(without) if d.shader == "elementwise"] == ["LOGISTIC+MUL"]
    assert with_pass.compiled.dispatches == without.compiled.dispatches - 1
    assert not [d for d in _dispatches(with_pass) if d.shader == "elementwise"]


def _untouched(model: bytes) -> None:
    before, after = _apply(model)
    assert [o.code for o in after.ops] == [o.code for o in before.ops]


def test_x_read_outside_the_tree_is_left_alone() -> None:
    shape = (1, 4, 4, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    h = _conv(mb, x, shape, 8, 3, seed=1)
    mb.output(_swish(mb, h, shape), mb.op("RELU", [h], shape))
    _untouched(mb.build())


def test_x_as_graph_output_is_left_alone() -> None:
    shape = (1, 4, 4, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    h = _conv(mb, x, shape, 8, 3, seed=1)
    mb.output(_swish(mb, h, shape), h)
    _untouched(mb.build())


def test_inner_tensor_read_outside_is_left_alone() -> None:
    """LOGISTIC(x) also feeds an output: the tree would have two results."""
    shape = (1, 4, 4, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    h = _conv(mb, x, shape, 8, 3, seed=1)
    gate = mb.op("LOGISTIC", [h], shape)
    mb.output(mb.op("MUL", [h, gate], shape), mb.op("RELU", [gate], shape))
    _untouched(mb.build())


def test_constant_leaf_that_cannot_broadcast_is_left_alone() -> None:
    """A [1, H, W, 1] constant is neither scalar, per-channel nor of x's shape."""
    shape = (1, 4, 4, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    h = _conv(mb, x, shape, 8, 3, seed=1)
    spatial = mb.const("spatial", np.linspace(0.5, 1.5, 16, dtype=np.float32).reshape(1, 4, 4, 1))
    mb.output(mb.op("MUL", [mb.op("MUL", [h, spatial], shape), mb.op("LOGISTIC", [h], shape)], shape))
    model = mb.build()
    _untouched(model)
    assert_matches_litert(model)


def test_chain_is_left_to_epilogue_fusion() -> None:
    """TANH -> + 1 -> * 0.5 reads every tensor once: epilogue fusion takes it op by op, labels unchanged."""
    shape = (1, 4, 4, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    h = _conv(mb, x, shape, 8, 3, seed=1)
    t = mb.op("ADD", [mb.op("TANH", [h], shape), _scalar(mb, 1.0)], shape)
    mb.output(mb.op("MUL", [t, _scalar(mb, 0.5)], shape))
    model = mb.build()
    _untouched(model)
    (conv,) = _dispatches(assert_matches_litert(model))
    assert conv.label.endswith("+TANH+ADD+MUL")


def test_merge_needs_the_registrys_consent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree op the support check refuses would fall back to the CPU, which cannot run it: no merge then."""
    from gpuengine.lowering.kernels import registry

    check = registry.check
    monkeypatch.setattr(registry, "check", lambda op, graph: "refused" if op.code == TREE else check(op, graph))
    _untouched(_model("swish"))


def test_malformed_tree_is_refused_by_the_kernel() -> None:
    from gpuengine.lowering.kernels import registry
    from gpuengine.model.ir import Tensor
    from gpuengine.model.ops import ExpressionStep as Step
    from gpuengine.passes.graph_utils import with_fields

    _, graph = _apply(_model("hard_swish_mul"))
    tree = graph.ops[1]
    assert registry.check(tree, graph) is None
    add, *rest = tree.opt(TREE_OPTION)  # ADD(x, 3): operands (0, 1)
    spatial = len(graph.tensors)
    graph.tensors.append(Tensor(spatial, "spatial", (1, 5, 6, 1), np.dtype(np.float32),
                                data=np.ones((1, 5, 6, 1), np.float32)))
    cases = {
        "Steps": with_fields(tree, tree=None),
        "later step": with_fields(tree, tree=(Step(add.op, (-2, 1)), *rest)),
        "does not read input 0": with_fields(tree, tree=(Step(add.op, (1, 1)),)),
        "cannot be broadcast": with_fields(tree, [tree.inputs[0], spatial, *tree.inputs[2:]]),
    }
    for words, op in cases.items():
        reason = registry.check(op, graph)
        assert reason is not None and words in reason, (words, reason)
