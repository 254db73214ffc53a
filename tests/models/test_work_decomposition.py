"""The work-decomposition rule for big GPUs, checked without one: with `--target discrete`, every dispatch of
every reference and zoo model that does at least 1,000,000 multiply-accumulates (elements read, for ops
without them) launches enough invocations that none does more than 16,384 of them.

This is a proxy: a kernel that leaves a 132-multiprocessor GPU idle fails it (MobileNet v2's 7x7 1x1 convs
with 960 input channels did ~23,000 MACs per invocation before they were split). The decompositions are the
ones a GPU program builds (runtime/program.py partition_specs), planned without compiling anything.
"""

from __future__ import annotations

import pytest
from helpers import REFERENCE_MODELS, reference_model

from gpuengine import zoo
from gpuengine.latency.target import named
from gpuengine.lowering.dispatches import dispatch_macs, launched
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions
from gpuengine.planning import planned_dispatches

BIG = 1_000_000
PER_INVOCATION = 16_384


def _model(name: str) -> bytes:
    return zoo.get(name) if name in zoo.MODELS else reference_model(name)


def _offenders(data: bytes, target: str, optimize: bool = True, signature: str | None = None) -> list[str]:
    model = read_model(data)
    graph = model.main if signature is None else model.subgraphs[
        next(s.subgraph for s in model.signatures if s.key == signature)]
    plan, partitions = planned_dispatches(graph, EngineOptions(optimize=optimize), named(target), model)
    out = []
    for specs in partitions:
        for spec in specs:
            macs, lanes = dispatch_macs(spec, plan.graph), launched(spec)
            if macs >= BIG and macs > PER_INVOCATION * lanes:
                out.append(f"{spec.label}: {macs} MACs over {lanes} invocations ({macs // lanes} each)")
    return out


@pytest.mark.parametrize("name", sorted(zoo.MODELS) + REFERENCE_MODELS)
@pytest.mark.parametrize("optimize", [True, False])
def test_big_dispatches_fill_a_discrete_gpu(name, optimize):
    assert _offenders(_model(name), "discrete", optimize) == []


def test_gemma3_shaped_prefill_fills_a_discrete_gpu():
    """Gemma-3-270M's attention shape (4 query heads on 1 KV head of 256, cache 1024; 2 layers, a small vocabulary)
    in its prefill of 32 tokens: 128 rows over 1,024 keys, 65,536 MACs an invocation in one workgroup a row; key
    chunks (attention.long_rows) split it further. About 1 s."""
    from gpuengine.zoo.decoder import DecoderConfig, decoder

    data = decoder(DecoderConfig(layers=2, width=640, heads=4, kv_heads=1, head_dim=256, mlp=2048, vocab=256,
                                 cache=1024, prefill=32, gemma=True, epsilon=1e-6))
    assert _offenders(data, "discrete", signature="prefill_32") == []


def test_the_rule_can_fail(monkeypatch):
    """Planned for a device of one lane, where only total work counts (large tiles, no splits), MobileNet v2's
    late 1x1 convs break the rule."""
    import dataclasses

    from gpuengine.latency import devices

    serial = dataclasses.replace(devices.lavapipe(cores=1), lanes=1)
    monkeypatch.setattr(devices, "for_target", lambda target: serial)
    offenders = _offenders(zoo.get("mobilenet_v2"), "cpu")
    assert len(offenders) >= 3 and all("CONV_2D 1x1" in o for o in offenders)
