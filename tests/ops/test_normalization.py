"""LayerNorm and RMSNorm written as ops (passes/fuse_normalization.py) run as one LAYER_NORM / RMS_NORM dispatch
(lowering/kernels/normalization.py), against LiteRT running the original ops; near misses stay as they are and still
match."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert

from gpuengine import Interpreter
from gpuengine.model.builder import ModelBuilder
from gpuengine.oracle import random_inputs, relative_error, run_litert
from gpuengine.zoo.vit import layer_norm, rms_norm


def _codes(it: Interpreter) -> list[str]:
    return [op.code for op in it.compiled.plan.graph.ops]


def _labels(it: Interpreter) -> list[str]:
    return [d.spec.label for p in it.compiled.gpu_programs for d in p.dispatches]


def _feeds(shape: tuple[int, ...], seed: int = 0, shift: float = 0.0) -> dict[int, np.ndarray]:
    """Rows with a mean and spread of their own (shift: an offset LayerNorm must remove)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, shape) * rng.uniform(0.5, 3.0, (*shape[:-1], 1)) + shift
    return {0: x.astype(np.float32)}


def ln_model(shape: tuple[int, ...], style: str, scale: bool = True, offset: bool = True, eps: float = 1e-5,
             scale_shape: tuple[int, ...] | None = None) -> bytes:
    c = shape[-1]
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    gamma = rng.uniform(0.5, 1.5, c) if scale else None
    beta = rng.uniform(-0.5, 0.5, c) if offset else None
    mb.output(layer_norm(mb, x, shape, style, gamma, beta, eps, scale_shape=scale_shape))
    return mb.build()


def _assert_fused(it: Interpreter, code: str, count: int = 1) -> None:
    """`count` ops `code`, each one dispatch; with passes off (GPUENGINE_OPTIMIZE=0 in CI) the ops as written."""
    if not it.compiled.options.optimize:
        assert code not in _codes(it)
        return
    assert _codes(it).count(code) == count, _codes(it)
    assert sum(label.startswith(code) for label in _labels(it)) == count, _labels(it)


STYLES = ["keras", "keras_neg", "tf", "torch", "sqrt_outside"]


@pytest.mark.parametrize("style", STYLES)
def test_layer_norm_styles(style):
    shape = (2, 5, 12)
    it = assert_matches_litert(ln_model(shape, style), _feeds(shape, shift=3.0))
    _assert_fused(it, "LAYER_NORM")
    if it.compiled.options.optimize:  # the whole graph is one normalization: the boundary converters and it
        assert len(_labels(it)) == 3, _labels(it)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("scale,offset", [(False, False), (True, False), (False, True)])
def test_layer_norm_without_scale_or_offset(style, scale, offset):
    shape = (3, 7, 10)  # channels not a multiple of 4
    it = assert_matches_litert(ln_model(shape, style, scale, offset), _feeds(shape, 2))
    _assert_fused(it, "LAYER_NORM")


@pytest.mark.parametrize("scale_shape", [(1, 1, 6), (1, 6)])
def test_broadcast_scale(scale_shape):
    shape = (2, 3, 6)
    it = assert_matches_litert(ln_model(shape, "torch", scale_shape=scale_shape), _feeds(shape, 3))
    _assert_fused(it, "LAYER_NORM")


@pytest.mark.parametrize("eps", [1e-12, 1e-3, 0.5])
def test_epsilon_values(eps):
    shape = (4, 9)
    it = assert_matches_litert(ln_model(shape, "keras", eps=eps), _feeds(shape, 4))
    _assert_fused(it, "LAYER_NORM")


@pytest.mark.parametrize("shape", [(7,), (3, 1, 2, 5), (1, 2, 3, 64)])
def test_ranks(shape):
    it = assert_matches_litert(ln_model(shape, "tf"), _feeds(shape, 5))
    _assert_fused(it, "LAYER_NORM")


@pytest.mark.parametrize("target", ["cpu", "discrete"])
def test_row_longer_than_a_workgroup(target):
    """1030 channels (258 slices, more than a workgroup's 256 invocations); split on a discrete target."""
    shape = (3, 1030)
    it = assert_matches_litert(ln_model(shape, "keras"), _feeds(shape, 6, shift=-2.0), target=target)
    _assert_fused(it, "LAYER_NORM")


def test_every_decomposition():
    """Each decomposition the kernel offers (splits through workgroup memory and through subgroup shuffles, within
    one of lavapipe's 8-wide subgroups and across several) against LiteRT, with a GELU in its epilogue."""
    shape = (2, 3, 150)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    rng = np.random.default_rng(1)
    y = layer_norm(mb, x, shape, "torch", rng.uniform(0.5, 1.5, 150), rng.uniform(-0.5, 0.5, 150))
    mb.output(mb.op("GELU", [y], shape, {"approximate": True}))
    data = mb.build()
    feeds = _feeds(shape, 7, shift=1.0)
    ref = run_litert(data, feeds)
    it = Interpreter(model_content=data, target="cpu", workgroup_cache="/nonexistent/cache.json", optimize=True)
    it.allocate_tensors()
    (prog,) = it.compiled.gpu_programs
    (index,) = [i for i, d in enumerate(prog.dispatches) if d.spec.shader == "normalization"]
    candidates = prog.dispatches[index].spec.variants.candidates
    assert {d.split for d in candidates} >= {1, 2, 16} and {d.subgroup for d in candidates} == {False, True}
    for d in candidates:
        prog.replace(index, d)
        for t, v in feeds.items():
            it.set_tensor(t, v)
        it.invoke()
        err = relative_error(it.get_tensor(it.get_output_details()[0]["index"]), ref[next(iter(ref))])
        assert err <= (1e-2 if it.compiled.precision == "fp16" else 1e-4), f"{d}: {err:.3g}"


def test_keep_dims_false_restored_by_reshape():
    """MEAN without keep_dims, its row shape restored by a RESHAPE: the same LayerNorm."""
    shape = (4, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    axis = mb.const("axis", np.array([1], np.int32))
    row = mb.const("row", np.array([4, 1], np.int32))
    mean = mb.op("RESHAPE", [mb.op("MEAN", [x, axis], (4,), {"keep_dims": False}), row], (4, 1))
    d = mb.op("SUB", [x, mean], shape)
    var = mb.op("RESHAPE", [mb.op("MEAN", [mb.op("MUL", [d, d], shape), axis], (4,), {"keep_dims": False}), row],
                (4, 1))
    y = mb.op("MUL", [d, mb.op("RSQRT", [mb.op("ADD", [var, mb.const("eps", np.float32(1e-5))], (4, 1))], (4, 1))],
              shape)
    mb.output(y)
    it = assert_matches_litert(mb.build(), _feeds(shape, 8))
    _assert_fused(it, "LAYER_NORM")


# -- near misses: left as they are (and still equal to LiteRT) ----------------------------------------------------


def test_mean_over_another_axis_is_not_fused():
    shape = (6, 5)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    axis = mb.const("axis", np.array([0], np.int32))
    mean = mb.op("MEAN", [x, axis], (1, 5), {"keep_dims": True})
    d = mb.op("SUB", [x, mean], shape)
    var = mb.op("MEAN", [mb.op("SQUARE", [d], shape), axis], (1, 5), {"keep_dims": True})
    r = mb.op("RSQRT", [mb.op("ADD", [var, mb.const("eps", np.float32(1e-5))], (1, 5))], (1, 5))
    mb.output(mb.op("MUL", [d, r], shape))
    it = assert_matches_litert(mb.build(), _feeds(shape, 9))
    assert "LAYER_NORM" not in _codes(it)


def test_runtime_epsilon_is_not_fused():
    shape = (3, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    eps = mb.input("eps", (1,))
    axis = mb.const("axis", np.array([-1], np.int32))
    mean = mb.op("MEAN", [x, axis], (3, 1), {"keep_dims": True})
    d = mb.op("SUB", [x, mean], shape)
    var = mb.op("MEAN", [mb.op("SQUARE", [d], shape), axis], (3, 1), {"keep_dims": True})
    mb.output(mb.op("MUL", [d, mb.op("RSQRT", [mb.op("ADD", [var, eps], (3, 1))], (3, 1))], shape))
    data = mb.build()
    feeds = {**_feeds(shape, 10), 1: np.array([1e-3], np.float32)}
    it = assert_matches_litert(data, feeds)
    assert "LAYER_NORM" not in _codes(it)


def test_intermediate_read_elsewhere_is_not_fused():
    """The variance is also a graph output: the ops stay (the normalization is only fused whole)."""
    shape = (3, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    axis = mb.const("axis", np.array([1], np.int32))
    mean = mb.op("MEAN", [x, axis], (3, 1), {"keep_dims": True})
    d = mb.op("SUB", [x, mean], shape)
    var = mb.op("MEAN", [mb.op("SQUARE", [d], shape), axis], (3, 1), {"keep_dims": True})
    mb.output(mb.op("MUL", [d, mb.op("RSQRT", [mb.op("ADD", [var, mb.const("eps", np.float32(1e-5))], (3, 1))],
                                     (3, 1))], shape), var)
    it = assert_matches_litert(mb.build(), _feeds(shape, 11))
    assert "LAYER_NORM" not in _codes(it)


def test_wrong_variance_is_not_fused():
    """SQUARED_DIFFERENCE against another row statistic than the mean (x - max): no LayerNorm."""
    shape = (3, 8)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    axis = mb.const("axis", np.array([1], np.int32))
    mean = mb.op("MEAN", [x, axis], (3, 1), {"keep_dims": True})
    var = mb.op("MEAN", [mb.op("SQUARED_DIFFERENCE", [x, mb.op("MUL", [mean, mb.const("two", np.float32(2.0))],
                                                                        (3, 1))], shape), axis], (3, 1),
                {"keep_dims": True})
    r = mb.op("RSQRT", [mb.op("ADD", [var, mb.const("eps", np.float32(1e-5))], (3, 1))], (3, 1))
    mb.output(mb.op("MUL", [mb.op("SUB", [x, mean], shape), r], shape))
    it = assert_matches_litert(mb.build(), _feeds(shape, 12))
    assert "LAYER_NORM" not in _codes(it)


# -- RMSNorm ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("square", ["MUL", "SQUARE"])
@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm(square, weight):
    shape = (1, 3, 10)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    w = np.random.default_rng(2).uniform(0.5, 1.5, 10) if weight else None
    mb.output(rms_norm(mb, x, shape, w, square=square))
    it = assert_matches_litert(mb.build(), _feeds(shape, 13, shift=0.5))
    _assert_fused(it, "RMS_NORM")


def test_rms_norm_squeezed_mean():
    """litert-torch's prefill form: MEAN without keep_dims, ADD eps on [B, T], RESHAPE to [B, T, 1], RSQRT."""
    shape = (1, 5, 12)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    ms = mb.op("MEAN", [mb.op("MUL", [x, x], shape), mb.const("axis", np.array([2], np.int32))], (1, 5),
               {"keep_dims": False})
    ms = mb.op("ADD", [ms, mb.const("eps", np.float32(1e-5))], (1, 5))
    r = mb.op("RSQRT", [mb.op("RESHAPE", [ms, mb.const("row", np.array([1, 5, 1], np.int32))], (1, 5, 1))],
              (1, 5, 1))
    mb.output(mb.op("MUL", [x, r], shape))
    it = assert_matches_litert(mb.build(), _feeds(shape, 16))
    _assert_fused(it, "RMS_NORM")


def test_rms_norm_long_row_discrete():
    shape = (2, 1030)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    mb.output(rms_norm(mb, x, shape, np.linspace(0.5, 1.5, 1030)))
    it = assert_matches_litert(mb.build(), _feeds(shape, 14), target="discrete")
    _assert_fused(it, "RMS_NORM")


def test_epilogue_fuses_into_the_normalization():
    """A GELU after the LayerNorm runs in its epilogue: one dispatch for both."""
    shape = (2, 4, 16)
    mb = ModelBuilder()
    x = mb.input("x", shape)
    y = layer_norm(mb, x, shape, "keras", np.ones(16), np.zeros(16))
    mb.output(mb.op("GELU", [y], shape, {"approximate": False}))
    it = assert_matches_litert(mb.build(), _feeds(shape, 15), optimize=True)
    assert [label for label in _labels(it) if "LAYER_NORM" in label] == [
        next(label for label in _labels(it) if label.startswith("LAYER_NORM"))]
    assert any("GELU" in label and "LAYER_NORM" in label for label in _labels(it)), _labels(it)


def test_passes_off_runs_the_ops():
    shape = (2, 5, 12)
    data = ln_model(shape, "keras")
    it = assert_matches_litert(data, random_inputs(data, 0), optimize=False)
    assert "LAYER_NORM" not in _codes(it)
