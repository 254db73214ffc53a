"""The compile check: every distinct shader of the shader matrix (scripts/dev/shader_matrix.py: the zoo, the MediaPipe
models and the decoders on this machine, every target class, fp32 and fp16, passes on and off) is taken by both
WebGPU implementations' WGSL compilers: Tint on Dawn's Null device (no GPU needed: create_shader_module and
create_compute_pipeline with shader-f16 and subgroups) and naga (wgpu-native's create_shader_module). A failure
names the kernel, a case it is in and the WGSL line. The same check prints its figures:
`python scripts/dev/wgsl_check.py`."""

from __future__ import annotations

import pytest
import wgsl_check  # scripts/dev

pytestmark = pytest.mark.wgsl

ENOUGH = 1000  # distinct shaders: the matrix of the zoo alone gives more; fewer means the enumeration broke


@pytest.fixture(scope="module")
def texts() -> dict[str, dict[str, tuple[str, str]]]:
    found, _, _ = wgsl_check.distinct()
    return found


def rejected(report: wgsl_check.Report) -> str:
    return "\n".join(f"{r.compiler}: {r.kernel} ({r.case}): {r.line}\n{r.message}" for r in report.rejected[:10])


def test_tint_takes_every_shader(texts: dict) -> None:
    pytest.importorskip("wgpudawn", reason="the Dawn compile check needs wgpudawn (pip install 'gpuengine[dawn]')")
    report = wgsl_check.check(texts, ("tint",))
    assert report.shaders["tint"] >= ENOUGH
    assert not report.rejected, f"{len(report.rejected)} shaders rejected by Tint:\n{rejected(report)}"
    # the shaders binding more storage buffers than the Null device allows (the kv-cache update of the decoders)
    # had their module compiled, not their pipeline: few, and named
    assert len(report.over_limit) <= 20, report.over_limit


def test_naga_takes_every_shader(texts: dict) -> None:
    report = wgsl_check.check(texts, ("naga",))
    assert report.shaders["naga"] >= ENOUGH
    assert not report.rejected, f"{len(report.rejected)} shaders rejected by naga:\n{rejected(report)}"


def test_the_check_can_fail() -> None:
    """What each compiler rejects, and the line it names: the engine's old spellings."""
    pytest.importorskip("wgpudawn")
    from gpuengine.runtime.webgpu import compile_error

    main = "@compute @workgroup_size(1) fn main() {\n  let x = bitcast<f32>(0x7f800000u);\n}\n"
    message = compile_error(wgsl_check.dawn_device(), main)
    assert message and "inf cannot be represented" in message
    assert wgsl_check.named_line(message, main) == "line 2: let x = bitcast<f32>(0x7f800000u);"
    enabled = "enable subgroups;\n" + main.replace("bitcast<f32>(0x7f800000u)", "1.0")
    assert compile_error(wgsl_check.naga_device(), enabled, pipeline=False)
