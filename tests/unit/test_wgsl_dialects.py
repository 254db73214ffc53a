"""The WGSL codegen writes is valid for both WebGPU implementations: the enable directives per implementation
(Dawn's Tint requires `enable subgroups;`, naga in wgpu-native 0.32 rejects it) and only where a shader uses
subgroups; no constant expression evaluating to inf or NaN (a WGSL shader-creation error naga lets through).
The compilers themselves: tests/models/test_wgsl_compile.py. No GPU."""

from __future__ import annotations

import re

import pytest

from gpuengine import zoo
from gpuengine.latency.target import named
from gpuengine.lowering import codegen
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions
from gpuengine.planning import planned_dispatches

# a bitcast of a literal to f32 is a constant expression: the old spelling of a non-finite constant
CONSTANT_BITCAST = re.compile(r"bitcast<f32>\(\s*(0x[0-9a-fA-F]+|[0-9]+)u?\s*\)")


def tiny_specs(precision: str = "fp32") -> list:
    """The zoo's `tiny` model (a subgroup reduction and a softmax, whose exp makes inf) planned for a discrete GPU."""
    parsed = read_model(zoo.get("tiny"))
    _, programs = planned_dispatches(parsed.subgraphs[0], EngineOptions(precision=precision), named("discrete"),
                                     parsed)
    return [spec for specs in programs for spec in specs]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_subgroups_are_enabled_on_dawn_only_and_only_where_used(precision: str) -> None:
    used = 0
    for spec in tiny_specs(precision):
        naga, tint = codegen.render(spec, precision, "wgpu"), codegen.render(spec, precision, "dawn")
        assert "enable subgroups;" not in naga
        if codegen.uses_subgroups(naga):
            used += 1
            f16 = "enable f16;\n" if naga.startswith("enable f16;\n") else ""
            assert tint == f16 + "enable subgroups;\n" + naga.removeprefix(f16), spec.label
        else:
            assert tint == naga, spec.label
    assert used, "the plan has no subgroup reduction: the test lost its subject"


def test_uses_subgroups_reads_builtins_and_values() -> None:
    assert codegen.uses_subgroups("x = subgroupShuffleXor(v, 1u);")
    assert codegen.uses_subgroups("fn main(@builtin(subgroup_size) n: u32)")
    assert not codegen.uses_subgroups("let subgroup_partials = 1; // a subgroup of lanes")


def test_no_shader_has_a_non_finite_constant_expression() -> None:
    calls = 0
    for spec in tiny_specs():
        text = codegen.render(spec)
        assert not CONSTANT_BITCAST.search(text), spec.label
        if "nonfinite_f32(" in text:
            calls += 1
            assert text.count("fn nonfinite_f32(") == 1, spec.label
    assert calls, "no shader makes an infinity: the test lost its subject"


def test_non_finite_literals_are_made_at_run_time() -> None:
    assert codegen.f32_literal(float("-inf")) == "nonfinite_f32(0xff800000u)"
    assert codegen.f32_literal(float("inf")) == "nonfinite_f32(0x7f800000u)"
    assert codegen.f32_literal(float("nan")).startswith("nonfinite_f32(0x7fc")
    assert codegen.f32_literal(-3.5) == "-3.5"


def test_an_unknown_implementation_is_refused() -> None:
    spec = tiny_specs()[0]
    with pytest.raises(ValueError, match="'vulkan' is not one of wgpu, dawn"):
        codegen.render(spec, "fp32", "vulkan")


def test_a_tensor_read_twice_is_bound_once() -> None:
    """WebGPU forbids overlapping writable views of one buffer in a dispatch (Dawn checks it): vit_tiny's attention
    reads its fused QKV tensor as vec4s (queries) and scalars (keys), bound once, the scalars read through the
    vec4 array; bert_tiny's reads it three times as vec4s."""
    merged = []
    for name in ("vit_tiny", "bert_tiny"):
        parsed = read_model(zoo.get(name))
        _, programs = planned_dispatches(parsed.subgraphs[0], EngineOptions(), named("discrete"), parsed)
        for spec in (s for specs in programs for s in specs):
            twice = codegen.duplicates(spec)
            if not twice:
                continue
            merged.append((name, spec.shader))
            tensors = [b.tensor for b in codegen.bound(spec) if b.tensor is not None and not b.writable]
            assert len(tensors) == len(set(tensors)), spec.label
            text = codegen.render(spec)
            for dropped, (kept, scalar) in twice.items():
                assert not re.search(rf"(?<![\w.]){dropped}\b", text), (spec.label, dropped)
                if scalar:
                    assert f"{kept}[(" in text, spec.label
    assert ("vit_tiny", "attention") in merged and ("bert_tiny", "attention") in merged, merged
