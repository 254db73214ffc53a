"""Rank and Dimension Propagation (model/symbolic.py) and its expression type (model/dims.py), without a GPU:
the expressions' algebra and bounds, forward transfer through the families' own shape rules, backward inference
through equations, the fixpoint, the operator classes, and the symbolic shapes evaluated at concrete sizes equal
to the concrete propagation (model/shapes.py)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import fcn_model

from gpuengine import zoo
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.dims import Dim, Undecidable, ceil_div, floordiv, maximum, solve, symbol
from gpuengine.model.ops import SAME, VALID, out_size
from gpuengine.model.reader import read_model
from gpuengine.model.shapes import propagate
from gpuengine.model.symbolic import analyze

H, W = symbol("H"), symbol("W")


# -- the expression type --------------------------------------------------------------------------------------------
def test_expressions_are_canonical_and_fold_to_ints() -> None:
    assert H + W == W + H and H * 2 + W == W + 2 * H
    assert (H + 1) - 1 == H and isinstance((H + 3) - H, int) and (H + 3) - H == 3
    assert (4 * H + 2) // 2 == 2 * H + 1  # (k*a + b) // k = a + b // k
    assert (H * W * 64) // (H * 64) == W  # exact division by a monomial
    assert (8 * H) % 4 == 0
    assert str(ceil_div(H, 2)) == "ceil(H/2)" and ceil_div(ceil_div(H, 2), 2) != ceil_div(H, 4)
    assert maximum(H, H + 1) == H + 1 and maximum(H, 1) == H and str(maximum(H, W)) == "max(H, W)"
    assert sum([H, W, 3]) == H + W + 3


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_window_sizes_evaluate_as_the_concrete_rule(padding: int, stride: int) -> None:
    """The concrete rule (model/ops.py out_size) run on a symbol, then evaluated, is the rule run on the number."""
    expr = out_size(padding, H, 3, stride)
    for h in range(3, 40):
        assert expr.subs({"H": h}) == out_size(padding, h, 3, stride)


def test_comparisons_are_decided_by_bounds_or_refused() -> None:
    assert H + 1 > 0 and H >= 1 and not H < 1  # every symbol is >= 1
    assert ceil_div(H, 2) >= 1 and 2 * H + 1 > H  # interval bounds: ceil(H/2) <= H is beyond them
    with pytest.raises(Undecidable):
        _ = H < 3
    with pytest.raises(Undecidable):
        int(H)
    with pytest.raises(Undecidable):
        _ = (H + 1) % 2
    with pytest.raises(Undecidable):
        floordiv(H, W)


def test_solve_binds_the_later_symbol() -> None:
    assert solve(2 * H + 4, 10) == ("H", 3)
    assert solve(H * 64, symbol("u") * 64, {"H": 0, "u": 1}) == ("u", H)
    assert solve(H + 1, H + 1) is None and solve(H * W, 6) is None  # nothing to do / nonlinear
    assert solve(H + 5, 3) is None  # H would be -2: not a size


# -- forward transfer and the classes -------------------------------------------------------------------------------
def test_fcn_shapes_are_expressions_of_the_input_symbols() -> None:
    graph = read_model(fcn_model()).main
    done = analyze(graph)
    x1, x2 = symbol("x[1]"), symbol("x[2]")
    out = [done.shape(graph.ops[k].outputs[0]) for k in range(len(graph.ops))]
    assert done.free == ["x[1]", "x[2]"] and not done.conflicts
    assert out[0] == (1, ceil_div(x1, 2), ceil_div(x2, 2), 8)  # conv stride 2 SAME
    assert out[4] == (1, x1, x2, 8)  # RESIZE to SLICE(SHAPE(x)): class 3 resolved through symbolic values
    assert done.values[graph.ops[3].outputs[0]] == [x1, x2]
    assert out[9] == (1, 8 * ceil_div(x1, 2) * ceil_div(x2, 2))  # RESHAPE to PACK(SHAPE(d)[0], -1)
    classes = [done.ops[k].op_class for k in range(len(graph.ops))]
    assert classes == [2, 2, 1, 3, 3, 2, 1, 3, 2, 3, 3]
    assert not any(o.split for o in done.ops)


@pytest.mark.parametrize("h,w", [(8, 8), (13, 7), (1, 30), (32, 17)])
def test_symbolic_shapes_evaluate_to_the_concrete_propagation(h: int, w: int) -> None:
    graph = read_model(fcn_model()).main
    done = analyze(graph)
    x = graph.inputs[0]
    concrete = propagate(graph, {x: (1, h, w, 3)}).graph
    evaluated = done.evaluate(done.input_env({x: (1, h, w, 3)}))
    assert len(evaluated) == len(graph.tensors)
    assert all(evaluated[t] == tuple(concrete.tensors[t].shape) for t in evaluated)


@pytest.mark.parametrize("name", ["mobilenet_v2", "vit_tiny"])
def test_static_models_keep_every_declared_shape(name: str) -> None:
    model = read_model(zoo.get(name))
    done = analyze(model.main, model)
    assert not done.free and not done.conflicts
    assert [done.shape(t) for t in range(len(model.main.tensors))] == [tuple(t.shape) for t in model.main.tensors]


def _where_model() -> bytes:
    """x [-1, 4] -> WHERE (class 4: as many rows as true elements) -> CAST -> ADD to itself."""
    mb = ModelBuilder()
    x = mb.input("x", (3, 4), dtype=np.bool_, shape_signature=(-1, 4))
    idx = mb.op("WHERE", [x], (5, 2), dtype=np.int64, shape_signature=(-1, 2))
    f = mb.op("CAST", [idx], (5, 2), dtype=np.float32, shape_signature=(-1, 2))
    mb.output(mb.op("ADD", [f, f], (5, 2), shape_signature=(-1, 2)))
    return mb.build()


def test_execution_determined_outputs_get_fresh_symbols_and_split() -> None:
    graph = read_model(_where_model()).main
    done = analyze(graph)
    assert [o.op_class for o in done.ops] == [4, 2, 2]
    assert done.ops[0].split and not done.ops[1].split
    fresh = done.shape(graph.ops[0].outputs[0])
    assert isinstance(fresh[0], Dim) and fresh[1] == 2
    assert done.shape(graph.ops[2].outputs[0]) == fresh  # the ops after it carry the fresh symbol
    assert "WHERE" in done.symbols[str(fresh[0])]


# -- backward inference and the fixpoint ----------------------------------------------------------------------------
def _backward_model() -> bytes:
    """a [3, 4] const and b = RELU(y), y [-1, 4]: CONCAT(a, b) is ADDed to a [10, 4] constant, so b's rows must
    be 7: known only backward, from the ADD through the CONCAT's sizes to y."""
    mb = ModelBuilder()
    y = mb.input("y", (2, 4), shape_signature=(-1, 4))
    b = mb.op("RELU", [y], (2, 4), shape_signature=(-1, 4))
    a = mb.const("a", np.ones((3, 4), np.float32))
    cat = mb.op("CONCATENATION", [a, b], (5, 4), {"axis": 0}, shape_signature=(-1, 4))
    mb.output(mb.op("ADD", [cat, mb.const("c", np.ones((10, 4), np.float32))], (10, 4)))
    return mb.build()


def test_backward_inference_solves_an_input_symbol() -> None:
    graph = read_model(_backward_model()).main
    done = analyze(graph)
    assert done.bindings == {"y[0]": 7} and not done.free
    assert done.shape(graph.inputs[0]) == (7, 4)
    assert done.shape(graph.ops[1].outputs[0]) == (10, 4)
    assert done.rounds >= 2  # a second round confirms nothing changes


def _reshape_backward_model() -> bytes:
    """x [-1, 8, 8] -> RESHAPE to a target computed by WHERE (unknown: fresh [u, 64]) -> ADD with [10, 64]: the
    ADD makes u 10; the RESHAPE's element count (x0 * 64 = u * 64) then gives x's symbol, backward."""
    mb = ModelBuilder()
    x = mb.input("x", (2, 8, 8), shape_signature=(-1, 8, 8))
    flag = mb.input("flag", (2,), dtype=np.bool_)
    rows = mb.op("WHERE", [flag], (2, 1), dtype=np.int64, shape_signature=(-1, 1))
    target = mb.op("CAST", [rows], (2, 1), dtype=np.int32, shape_signature=(-1, 1))
    flat = mb.op("RESHAPE", [x, mb.op("SQUEEZE", [target], (2,), dtype=np.int32, shape_signature=(-1,))],
                 (2, 64), shape_signature=(-1, 64))
    mb.output(mb.op("ADD", [flat, mb.const("c", np.ones((10, 64), np.float32))], (10, 64)))
    return mb.build()


def test_backward_through_a_reshape_element_count() -> None:
    graph = read_model(_reshape_backward_model()).main
    done = analyze(graph)
    assert done.shape(graph.inputs[0]) == (10, 8, 8)
    assert done.bindings["x[0]"] == 10
    reshape = next(k for k, op in enumerate(graph.ops) if op.code == "RESHAPE")
    assert done.ops[reshape].split  # class 3 with a target known only at run time


def test_broadcast_operands_are_unified() -> None:
    """Two inputs with their own symbols added together: one size (SoD²'s assumption; runs check it again)."""
    mb = ModelBuilder()
    p = mb.input("p", (2, 4), shape_signature=(-1, 4))
    q = mb.input("q", (2, 4), shape_signature=(-1, 4))
    mb.output(mb.op("ADD", [p, q], (2, 4), shape_signature=(-1, 4)))
    graph = read_model(mb.build()).main
    done = analyze(graph)
    assert done.free == ["p[0]"] and done.bindings == {"q[0]": symbol("p[0]")}
    assert done.shape(graph.outputs[0]) == (symbol("p[0]"), 4)


def test_a_fixed_table_pins_a_dynamic_sequence_length() -> None:
    """bert_tiny asked to take any sequence length: its position embeddings [1, 32, 64] are added to the tokens',
    so backward inference finds the length must be 32."""
    model = read_model(zoo.get("bert_tiny"))
    graph = model.main
    done = analyze(graph, model, dynamic={graph.inputs[0]: (1,)})
    assert done.bindings == {"input_ids[1]": 32} and not done.free


def test_probe_shapes_move_only_the_free_sizes() -> None:
    """planning.probe_shapes: the sizes the parametric kernels are made from (lowering/parametric.py)."""
    from gpuengine.planning import probe_shapes

    graph = read_model(fcn_model()).main
    x = graph.inputs[0]
    assert probe_shapes(graph, None, {x: (1, 8, 6, 3)}) == [{x: (1, 15, 13, 3)}, {x: (1, 45, 37, 3)}]
    static = read_model(zoo.get("tiny")).main
    assert probe_shapes(static, None, {}) == []
    pinned = read_model(_backward_model()).main  # y's size is found to be 7: nothing free to move
    assert probe_shapes(pinned, None, {}) == []
