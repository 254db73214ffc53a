"""Dawn as the second WebGPU implementation (webgpu="dawn", wgpudawn): a model compiles on it (Tint compiles
every kernel of the plan); where Dawn finds a GPU the model matches LiteRT as on wgpu-native, where it finds only
its Null backend (no GPU: this machine) inspect and --dump-wgsl work and running says so in one line."""

from __future__ import annotations

import pytest
from helpers import assert_matches_litert

from gpuengine import AdapterError, Interpreter, zoo

pytest.importorskip("wgpudawn", reason="webgpu='dawn' needs wgpudawn (pip install 'gpuengine[dawn]')")


def test_a_model_compiles_on_dawn_and_runs_or_says_why_not() -> None:
    it = Interpreter(model_content=zoo.get("mobilenet_v2"), webgpu="dawn")
    it.allocate_tensors()  # every kernel through Tint
    gpu = it.compiled.gpu
    assert gpu.webgpu == "dawn" and it.compiled.gpu_programs
    assert all("enable subgroups;" in d.source for p in it.compiled.gpu_programs for d in p.dispatches
               if "subgroupShuffleXor" in d.source)
    if gpu.compile_only:
        with pytest.raises(AdapterError, match="only its Null backend"):
            it.invoke()
    else:  # a GPU Dawn can run on: the same answers as on wgpu-native
        assert_matches_litert(zoo.get("mobilenet_v2"), webgpu="dawn", tol=1e-4)


@pytest.mark.parametrize("name", ["tiny", "bert_tiny", "vit_tiny", "decoder_tiny"])
def test_every_dispatch_binds_and_records_on_dawn(name: str) -> None:
    """Dawn validates each bind group and command buffer as it is recorded (wgpu-native checks less): a tensor read
    twice in one dispatch (bert_tiny's fused QKV attention, vit_tiny's through a vec4 and a scalar view, a fused
    prologue) must be bound once."""
    it = Interpreter(model_content=zoo.get(name), webgpu="dawn", target="discrete")
    it.allocate_tensors()  # records every dispatch of every program
    assert it.compiled.gpu.webgpu == "dawn"


def test_the_cli_inspects_on_dawn_and_refuses_to_run_on_its_null_backend(tmp_path, capsys) -> None:
    from gpuengine.tools.cli import main

    from gpuengine.runtime.device import get_device

    if not get_device(webgpu="dawn").compile_only:
        pytest.skip("Dawn runs on a GPU here: nothing to refuse")
    assert main(["inspect", "tiny", "--webgpu", "dawn", "--dump-wgsl", str(tmp_path)]) == 0
    assert "via Null" in capsys.readouterr().out
    assert any("enable subgroups;" in f.read_text() for f in tmp_path.glob("*.wgsl"))
    assert main(["run", "tiny", "--webgpu", "dawn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Dawn" in err[0] and "Null backend" in err[0], err
