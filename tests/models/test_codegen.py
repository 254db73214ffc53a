"""Code generation: numbers only, small constants baked as shader literals, identical text compiled once."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert, run_gpuengine, run_litert

from gpuengine.lowering.codegen import bound, is_baked, literal, render
from gpuengine.lowering.kernels.base import Binding, Code, KernelSpec
from gpuengine.model.builder import ModelBuilder
from gpuengine.runtime.program import GpuProgram


def test_literals_are_numbers_or_code_only():
    assert literal(3) == "3" and literal(2.0) == "2.0" and literal(True) == "true"
    assert literal(Code("x + 1")) == "x + 1"
    with pytest.raises(TypeError):
        literal("a user string")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        literal(float("inf"))


def test_small_constants_are_baked_and_big_ones_bound():
    small = Binding("alpha", data=np.arange(8, dtype=np.float32))
    big = Binding("table", data=np.zeros(4 * 65, np.float32))
    params = {"S": 1, "H": 1, "W": 1, "READERS": Code(""), "BODY": Code("var value = vec4<f32>(0.0);")}
    spec = KernelSpec("elementwise", params, [small, big, Binding("dst", tensor=0, writable=True)],
                      grid=(1, 1, 1), workgroup=(1, 1, 1))
    assert is_baked(small) and not is_baked(big)
    assert [b.name for b in bound(spec)] == ["table", "dst"]
    text = render(spec)
    assert "var<private> alpha: array<vec4<f32>, 2>" in text and "vec4<f32>(4.0, 5.0, 6.0, 7.0)" in text
    assert "@binding(0) var<storage, read> table" in text and "@binding(1) var<storage, read_write> dst" in text


def test_non_finite_constants_stay_in_buffers():
    """WGSL takes no bitcast in a private array's initializer (a fuzzed conv bias with an inf failed to compile):
    small constants holding inf or NaN are bound as buffers, and the model runs as LiteRT runs it."""
    c = Binding("c", data=np.array([np.inf, -np.inf, 1, 2], np.float32))
    spec = KernelSpec("elementwise", {"S": 1, "H": 1, "W": 1, "READERS": Code(""), "BODY": Code("var value = c[0];")},
                      [c, Binding("dst", tensor=0, writable=True)], grid=(1, 1, 1), workgroup=(1, 1, 1))
    assert not is_baked(c) and [b.name for b in bound(spec)] == ["c", "dst"]
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    bias = np.array([np.inf, 0.5, np.nan], np.float32)
    mb.output(mb.op("CONV_2D", [x, mb.const("w", rng.standard_normal((3, 1, 1, 3)).astype(np.float32)),
                                mb.const("b", bias)], (1, 4, 4, 3), {"padding": "SAME", "stride_w": 1, "stride_h": 1}))
    model = mb.build()
    feeds = {0: rng.standard_normal((1, 4, 4, 3)).astype(np.float32)}
    (got,), (ref,) = run_gpuengine(model, feeds)[0].values(), run_litert(model, feeds).values()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # inf and NaN where LiteRT has them


def test_prelu_alphas_and_conv_bias_are_shader_literals():
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = mb.input("x", (1, 6, 6, 5))
    y = mb.op("CONV_2D", [x, mb.const("w", rng.standard_normal((7, 3, 3, 5)).astype(np.float32)),
                          mb.const("b", rng.standard_normal(7).astype(np.float32))], (1, 6, 6, 7),
              {"padding": "SAME", "stride_w": 1, "stride_h": 1})
    z = mb.op("PRELU", [y, mb.const("alpha", rng.uniform(0, 1, (1, 1, 7)).astype(np.float32))], (1, 6, 6, 7))
    mb.output(z)
    it = assert_matches_litert(mb.build())
    prog = next(p for p in it.compiled.programs if isinstance(p, GpuProgram))
    conv = next(d for d in prog.dispatches if d.spec.shader.startswith("conv2d"))
    assert "var<private> bias" in conv.source and "var<private> in_f" in conv.source  # bias and fused alphas
    assert all(b.name not in ("bias",) for b in bound(conv.spec))


def test_a_helper_shared_by_prologue_and_epilogue_is_defined_once():
    """TANH folded into a 1x1 conv's loads and TANH fused into its epilogue both call tanh4: one definition."""
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 6))
    t = mb.op("TANH", [x], (1, 4, 4, 6))
    y = mb.op("CONV_2D", [t, mb.const("w", rng.standard_normal((5, 1, 1, 6)).astype(np.float32)),
                          mb.const("b", rng.standard_normal(5).astype(np.float32))], (1, 4, 4, 5),
              {"padding": "VALID", "stride_w": 1, "stride_h": 1})
    mb.output(mb.op("TANH", [y], (1, 4, 4, 5)))
    it = assert_matches_litert(mb.build())
    conv = next(d for d in it.compiled.gpu_programs[0].dispatches if d.spec.shader == "conv2d_1x1")
    assert conv.source.count("fn tanh4(") == 1 and "load_src" in conv.source
