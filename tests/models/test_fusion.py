"""Elementwise fusion (gpuengine/fusion.py) on built models: which ops end up in one dispatch, which tensors
must stay materialized, the producer move for late operands, and that fused and unfused runs agree with each
other and with LiteRT."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import assert_matches_litert, random_inputs, relative_error, run_gpuengine, run_litert

from gpuengine.model.builder import ModelBuilder

CONVERTERS = ("bhwc_to_phwc4", "phwc4_to_bhwc")


def dispatches(it: Any) -> list[Any]:
    """Every compute dispatch of the GPU partitions, in order, without the layout converters."""
    return [d for p in it.compiled.programs for d in getattr(p, "dispatches", []) if d.spec.shader not in CONVERTERS]


def fused_ops(it: Any) -> list[list[str]]:
    """Per dispatch, the op codes it computes (producer first, then its fused epilogue ops)."""
    graph = it.compiled.plan.graph
    return [[graph.ops[i].code for i in d.spec.ops] for d in dispatches(it)]


def conv(mb: ModelBuilder, x: int, shape: tuple[int, int, int, int], oc: int, seed: int = 0, k: int = 3) -> int:
    rng = np.random.default_rng(seed)
    w = mb.const(f"w{seed}", rng.standard_normal((oc, k, k, shape[3])).astype(np.float32) * 0.3)
    b = mb.const(f"b{seed}", rng.standard_normal(oc).astype(np.float32))
    return mb.op("CONV_2D", [x, w, b], (*shape[:3], oc), {"padding": "SAME", "stride_h": 1, "stride_w": 1})


def check_fused_vs_unfused(model: bytes) -> Any:
    """Both runs match LiteRT within 1e-4 and each other within 1e-5; returns the fused interpreter."""
    feeds = random_inputs(model)
    ref = run_litert(model, feeds)
    fused = assert_matches_litert(model, feeds, tol=1e-4)
    plain = assert_matches_litert(model, feeds, tol=1e-4, optimize=False)
    got_fused, _ = run_gpuengine(model, feeds)
    got_plain, _ = run_gpuengine(model, feeds, optimize=False)
    for t in ref:
        assert relative_error(got_fused[t], got_plain[t]) <= 1e-5
    assert plain.compiled.dispatches >= fused.compiled.dispatches
    return fused


def test_conv_relu_residual_add_is_one_dispatch() -> None:
    """conv -> RELU -> ADD(residual): the residual comes from an earlier tensor (read by the conv too, so
    materialized); RELU and ADD run in the second conv's epilogue."""
    shape = (1, 8, 7, 6)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    t = conv(mb, x, shape, 6, seed=1)
    c = conv(mb, t, shape, 6, seed=2)
    r = mb.op("RELU", [c], shape)
    mb.output(mb.op("ADD", [r, t], shape))
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["CONV_2D"], ["CONV_2D", "RELU", "ADD"]]
    fused = dispatches(it)[1]
    assert fused.spec.label.endswith("+RELU+ADD")
    # The ADD's other operand is read by a generated reader function in the conv shader (which compiled: it ran).
    assert "fn read_f2_b(" in fused.source and "read_f2_b(ob, oy, ox, os)" in fused.source
    # The intermediate conv and RELU outputs never exist: only x, t and the output are bound.
    bound = {b.tensor for d in dispatches(it) for b in d.spec.bindings if b.tensor is not None}
    assert c not in bound and r not in bound and t in bound


def test_unfused_run_has_one_dispatch_per_op() -> None:
    shape = (1, 6, 6, 4)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    c = conv(mb, x, shape, 4)
    r = mb.op("RELU", [c], shape)
    mb.output(mb.op("ADD", [r, x], shape))
    model = mb.build()
    plain = assert_matches_litert(model, optimize=False)
    assert fused_ops(plain) == [["CONV_2D"], ["RELU"], ["ADD"]]
    assert fused_ops(assert_matches_litert(model)) == [["CONV_2D", "RELU", "ADD"]]


def test_tensor_with_two_readers_is_materialized() -> None:
    shape = (1, 6, 5, 3)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    c = conv(mb, x, shape, 5)
    a = mb.op("RELU", [c], (*shape[:3], 5))
    b = mb.op("LOGISTIC", [c], (*shape[:3], 5))
    mb.output(a, b)
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["CONV_2D"], ["RELU"], ["LOGISTIC"]]
    conv_spec = dispatches(it)[0].spec
    assert any(b.writable and b.tensor == c for b in conv_spec.bindings)


def test_graph_output_is_materialized() -> None:
    """A tensor that is also a graph output must be written even if only one op reads it."""
    shape = (1, 6, 5, 4)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    c = conv(mb, x, shape, 4)
    mb.output(c, mb.op("RELU", [c], shape))
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["CONV_2D"], ["RELU"]]


@pytest.mark.parametrize("chain", [["RELU", "TANH", "ABS"], ["NEG", "EXP", "SQUARE", "LOGISTIC", "RELU6"]])
def test_unary_chain_after_graph_input_fuses(chain: list[str]) -> None:
    """The first op reads a graph input (written by a converter, which has no epilogue): it becomes its own
    elementwise dispatch, and the rest of the chain fuses into it."""
    shape = (2, 5, 3, 7)
    mb = ModelBuilder()
    y = mb.input("x", shape)
    for code in chain:
        y = mb.op(code, [y], shape)
    mb.output(y)
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [chain]
    assert dispatches(it)[0].spec.label == "+".join(chain)


def test_binary_chain_with_constant_operands_fuses() -> None:
    shape = (1, 4, 6, 5)
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = mb.op("MUL", [x, mb.const("s", rng.uniform(0.5, 2, (5,)).astype(np.float32))], shape)
    y = mb.op("ADD", [mb.const("t", rng.uniform(-1, 1, (1, 1, 6, 1)).astype(np.float32)), y], shape)
    y = mb.op("RELU", [y], shape)
    mb.output(y)
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["MUL", "ADD", "RELU"]]


def test_late_operand_moves_the_producer() -> None:
    """ADD(a, b) where a's producer runs before b's: the producer of a is moved after b's so the ADD can sit
    in its epilogue (b is ready by then)."""
    shape = (1, 7, 6, 5)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    a = mb.op("RELU", [conv(mb, x, shape, 5, seed=1)], shape)  # conv 0 (+RELU)
    b = conv(mb, x, shape, 5, seed=2)  # conv 1, written after a
    mb.output(mb.op("ADD", [a, b], shape))
    it = check_fused_vs_unfused(mb.build())
    # conv 0's dispatch (with RELU and the ADD) now runs after conv 1.
    assert fused_ops(it) == [["CONV_2D"], ["CONV_2D", "RELU", "ADD"]]
    assert dispatches(it)[0].spec.ops == [2] and dispatches(it)[1].spec.ops == [0, 1, 3]


def test_late_operand_with_long_chain() -> None:
    """The moved producer's own inputs stay alive until it runs (memory plan follows the final order)."""
    shape = (1, 8, 8, 4)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    a = conv(mb, x, shape, 4, seed=1)
    b = x
    for k in range(3):  # several convs written after a, whose buffers could be reused by a's
        b = mb.op("RELU", [conv(mb, b, shape, 4, seed=10 + k)], shape)
    mb.output(mb.op("SUB", [a, b], shape))
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it)[-1] == ["CONV_2D", "SUB"]


def test_broadcast_operand_fuses() -> None:
    """An operand of another shape (broadcast over the output) is read through a reader function."""
    shape = (1, 6, 6, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    g = mb.input("g", (1, 1, 1, 8))
    c = conv(mb, x, shape, 8)
    mb.output(mb.op("MUL", [c, g], shape))
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["CONV_2D", "MUL"]]
    assert "fn read_f1_b(" in dispatches(it)[0].source


def test_shape_changing_op_is_not_fused() -> None:
    """ADD whose output is larger than the producer's tensor (broadcasting it) stays a separate dispatch."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 1, 1, 4))
    y = mb.input("y", (1, 5, 5, 4))
    r = mb.op("RELU", [x], (1, 1, 1, 4))
    mb.output(mb.op("ADD", [r, y], (1, 5, 5, 4)))
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["RELU"], ["ADD"]]


def test_mobilenet_like_block() -> None:
    """Expand -> depthwise -> project with RELU6 ops and a residual: fused and unfused agree."""
    shape = (1, 10, 9, 8)
    rng = np.random.default_rng(4)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    e = mb.op("RELU6", [conv(mb, x, shape, 16, seed=1, k=1)], (1, 10, 9, 16))
    dw = mb.op("DEPTHWISE_CONV_2D", [e, mb.const("dw", rng.standard_normal((1, 3, 3, 16)).astype(np.float32)),
                                     mb.const("db", rng.standard_normal(16).astype(np.float32))],
               (1, 10, 9, 16), {"padding": "SAME", "stride_h": 1, "stride_w": 1, "depth_multiplier": 1})
    d = mb.op("RELU6", [dw], (1, 10, 9, 16))
    p = conv(mb, d, (1, 10, 9, 16), 8, seed=3, k=1)
    mb.output(mb.op("ADD", [x, p], shape))
    it = check_fused_vs_unfused(mb.build())
    assert fused_ops(it) == [["CONV_2D", "RELU6"], ["DEPTHWISE_CONV_2D", "RELU6"], ["CONV_2D", "ADD"]]
