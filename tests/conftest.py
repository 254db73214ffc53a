"""The tests, in tiers (scripts/test.sh runs tests/unit first, in a run of its own):

- unit/    no GPU adapter, no LiteRT (unit/conftest.py refuses both): reader, builder, shape rules, validation
           rules, partition, layout, memory planners, latency model, tuning search, bundles and sampling
- ops/     one op (or op family) on the GPU against LiteRT; scripts/test.sh runs them again unoptimized, in fp16
           and in mixed precision
- models/  whole graphs on the GPU: passes, fusion and lowering end to end, the zoo, MediaPipe and decoders
- api/     Interpreter, SignatureRunner, CompiledModel, TensorBuffer, pipelines, control flow, options, the CLI
- llm/     gpuengine.llm's Engine and the decoders' KV caches on the GPU

Shared here: a bounded, seeded hypothesis profile (lavapipe is slow), the GPU device, the toy decoder's bundle, and
the test matrix's switches (read here, not in the library): GPUENGINE_PRECISION=fp16 skips the fp32_only tests,
GPUENGINE_TEST_MIXED=odd|even keeps half the tensors in f32 in helpers.run_gpuengine. helpers.py (running and
comparing) and builders.py (small models) are imported by the test modules; no test module imports another."""

from __future__ import annotations

import os
from pathlib import Path

import helpers
import pytest
from builders import bnth_cache, build_bundle
from hypothesis import HealthCheck, settings

helpers.mixed_parity = os.environ.get("GPUENGINE_TEST_MIXED", "").strip().lower()

settings.register_profile(
    "gpuengine", max_examples=int(os.environ.get("GPUENGINE_EXAMPLES", "10")), deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=True,
)
settings.load_profile("gpuengine")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy decoder (../shared/models) as a .litertlm bundle, its KV cache in [B, N, T, H] (builders.py)."""
    toy = helpers.SHARED_MODELS / "toy_decoder_kv.tflite"
    directory = tmp_path_factory.mktemp("llm")
    (directory / "toy_bnth.tflite").write_bytes(bnth_cache(toy.read_bytes()))
    return build_bundle(directory, directory / "toy_bnth.tflite")


@pytest.fixture(scope="session")
def gpu():
    from gpuengine.runtime.device import get_device

    return get_device()


def pytest_collection_modifyitems(config, items):
    """Under GPUENGINE_PRECISION=fp16 (the op tests' fp16 run), skip the tests of values f16 cannot hold."""
    if os.environ.get("GPUENGINE_PRECISION", "").strip().lower() != "fp16":
        return
    for item in items:
        marker = item.get_closest_marker("fp32_only")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"fp32 only: {marker.args[0] if marker.args else ''}"))
