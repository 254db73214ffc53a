"""passes/constant_operands.py, IR -> IR: a subgraph input the caller feeds a constant gains the constant's data (and
then folds, as in Keras-converted IF branches: a TRANSPOSE of the filter operand before a CONV_2D); the input
graph is left as it was; values of another shape or dtype, and variables, stay run-time inputs. No GPU."""

from __future__ import annotations

import numpy as np

from gpuengine.model.builder import ModelBuilder
from gpuengine.passes.constant_operands import bind_constant_operands
from gpuengine.passes.fold_constants import fold_constants
from gpuengine.reference import run_reference


def branch() -> tuple[ModelBuilder, np.ndarray]:
    """x [1,4,4,2] and a filter operand in HWIO [3,3,2,5] -> TRANSPOSE to OHWI -> CONV_2D (bias constant)."""
    mb = ModelBuilder("branch")
    x = mb.input("x", (1, 4, 4, 2))
    w = mb.input("w_hwio", (3, 3, 2, 5))
    ohwi = mb.op("TRANSPOSE", [w, mb.const("perm", np.array([3, 0, 1, 2], np.int32))], (5, 3, 3, 2))
    bias = mb.const("b", np.linspace(-1, 1, 5).astype(np.float32))
    mb.output(mb.op("CONV_2D", [x, ohwi, bias], (1, 4, 4, 5), {"padding": 0, "stride_w": 1, "stride_h": 1}))
    weights = np.random.default_rng(0).standard_normal((3, 3, 2, 5)).astype(np.float32)
    return mb, weights


def test_a_constant_operand_becomes_data_and_its_transpose_folds():
    mb, weights = branch()
    g = mb.graph()
    before = [None if t.data is None else np.asarray(t.data).copy() for t in g.tensors]
    bound = bind_constant_operands(g, {1: weights})
    assert [t.data is None for t in g.tensors] == [b is None for b in before]  # the input graph untouched
    assert bound.inputs == g.inputs  # still fed positionally by the host
    np.testing.assert_array_equal(bound.tensors[bound.inputs[1]].data, weights)
    folded = fold_constants(bound)
    assert [o.code for o in folded.ops] == ["CONV_2D"]  # the TRANSPOSE is now a constant filter
    x = np.random.default_rng(1).standard_normal((1, 4, 4, 2)).astype(np.float32)
    want = run_reference(g, [x, weights])
    got = run_reference(folded, [x, weights])
    for t in g.outputs:
        np.testing.assert_allclose(got[t], want[t], rtol=1e-6, atol=1e-6)


def test_values_that_do_not_fit_stay_run_time_inputs():
    mb, weights = branch()
    g = mb.graph()
    assert bind_constant_operands(g, {}) is g
    for values in ({1: weights.astype(np.float64)}, {1: weights[:2]}, {7: weights}):
        bound = bind_constant_operands(g, values)
        assert all(bound.tensors[t].data is None for t in bound.inputs)
        assert [o.code for o in fold_constants(bound).ops] == ["TRANSPOSE", "CONV_2D"]
