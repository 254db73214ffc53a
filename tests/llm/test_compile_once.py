"""Compile once per distinct kernel, plan in time linear in the layers (issue 22 part 6).

Counts, not times: identical layers must add dispatches but no distinct shader (their constants are bound, not
baked), a deeper model must compile no pipeline a shallower one of the same layer shape did not, the index maps
of layout views are evaluated once per distinct view, and the passes copy the graph a number of times that does
not grow with the layers (a pass starting over after every rewrite made a 30-layer decoder's planning quadratic:
25 s for its decode signature on the dev box, 3 s after). The builder's decoder at the zoo's tiny size stands
for SmolLM's shape (scripts/dev/first_call.py measures the real one).
"""

from __future__ import annotations

import collections
import dataclasses

import pytest

from gpuengine import Interpreter
from gpuengine.latency import devices
from gpuengine.latency.target import named
from gpuengine.lowering import codegen
from gpuengine.lowering.dispatches import Choices, partition_specs
from gpuengine.lowering.kernels import layout_view
from gpuengine.model import ir
from gpuengine.model.reader import read_model
from gpuengine.options import EngineOptions
from gpuengine.planning import plan_graph
from gpuengine.zoo.decoder import DecoderConfig, decoder

LAYERS = (2, 4, 6)
CONFIG = DecoderConfig()  # width 64, 3 query heads on 1 KV head of 64, int8, vocab 256, cache 32, prefill 8


@pytest.fixture(scope="module")
def models() -> dict[int, ir.Model]:
    return {n: read_model(decoder(CONFIG, seed=0, layers=n)) for n in LAYERS}


def planned(model: ir.Model, target: str = "cpu") -> dict[str, list]:
    """Every signature's GPU dispatches as the runtime would build them for `target` (no GPU touched)."""
    options = dataclasses.replace(EngineOptions(), latency_device=devices.for_target(named(target)))
    result = {}
    for sig in model.signatures:
        plan = plan_graph(model.subgraphs[sig.subgraph], options, model)
        assert [p.device for p in plan.partitions] == ["gpu"], sig.key
        result[sig.key] = [spec for p in plan.partitions
                           for spec in partition_specs(plan.graph, p.ops, p.inputs, p.outputs, True,
                                                       Choices(named(target)))[0]]
    return result


@pytest.mark.parametrize("target", ["cpu"])
def test_distinct_shaders_do_not_grow_with_the_layers(models, target):
    dispatches, distinct = {}, {}
    for n, model in models.items():
        specs = planned(model, target)
        dispatches[n] = {key: len(s) for key, s in specs.items()}
        distinct[n] = len({codegen.render(spec) for s in specs.values() for spec in s})
    assert distinct[2] == distinct[4] == distinct[6], distinct
    for key in dispatches[2]:  # every layer adds the same dispatches
        per_layer = dispatches[4][key] - dispatches[2][key]
        assert per_layer > 0 and dispatches[6][key] - dispatches[4][key] == per_layer, dispatches
    assert (dispatches[4]["decode"] - dispatches[2]["decode"]) / 2 <= 8  # the goal: <= 8 a layer


def test_layout_views_are_evaluated_once_per_distinct_view(models, monkeypatch):
    """The numpy evaluation of a view's index map (kernels/index_map.analyse) runs once per distinct view: as often
    for 6 layers as for 2."""
    calls = collections.Counter()
    analyse = layout_view.analyse

    def counted(*args, **kwargs):
        calls["analyse"] += 1
        return analyse(*args, **kwargs)

    monkeypatch.setattr(layout_view, "analyse", counted)
    counts = {}
    for n in (2, 6):
        layout_view.reader.cache_clear()
        layout_view.writer_index.cache_clear()
        calls.clear()
        planned(models[n])
        counts[n] = calls["analyse"]
    assert counts[2] == counts[6] > 0, counts


def test_passes_copy_the_graph_linearly_in_the_layers(models, monkeypatch):
    """The tensors copied by Graph.copy while planning grow by the same amount per layer (each pass copies the
    graph once): a pass that copied the graph again after every rewrite would copy quadratically."""
    copied = collections.Counter()
    copy = ir.Graph.copy

    def counted(self):
        copied["tensors"] += len(self.tensors)
        return copy(self)

    monkeypatch.setattr(ir.Graph, "copy", counted)
    totals = {}
    for n in LAYERS:
        copied.clear()
        planned(models[n])
        totals[n] = copied["tensors"]
    assert totals[6] - totals[4] == totals[4] - totals[2] > 0, totals


def test_a_deeper_model_compiles_no_new_pipeline():
    """On one device (shared by every interpreter of a process), the 4-layer decoder's two signatures have as many
    distinct shaders as the 3-layer one's (the runtime's own, binding access modes from the memory plan included),
    and the only pipelines it adds are for shaders baking a constant of their own (the final norm, whose weights
    differ between the two seeded models); a per-layer kernel is never new."""
    sources, gpu, before = {}, None, 0
    for n in (3, 4):
        interpreter = Interpreter(model_content=decoder(CONFIG, seed=0, layers=n))
        runners = [interpreter.get_signature_runner(key) for key in interpreter.get_signature_list()]
        if gpu is not None:
            before = len(gpu.pipelines)
        programs = [p for r in runners for p in r.compiled.gpu_programs]
        gpu = runners[0].compiled.gpu
        sources[n] = {d.source for p in programs for d in p.dispatches}
        assert sources[n] <= set(gpu.pipelines)
    new = sources[4] - sources[3]
    assert len(sources[4]) == len(sources[3])
    assert len(gpu.pipelines) - before == len(new)
    assert all("var<private>" in s for s in new), [s[:300] for s in new if "var<private>" not in s]


def test_constants_baked_per_layer_are_bound_instead(models):
    """At the tiny size a layer's norm weights and channel scales are small enough to bake (codegen.BAKE_LIMIT):
    share_shaders binds them (as f32, the literals' type) where dispatches would otherwise differ only in them, so the
    layers' dispatches render one text; a constant baked in one dispatch alone (the final norm) stays baked."""
    specs = [spec for s in planned(models[4]).values() for spec in s]
    unbaked = [spec for spec in specs if any(b.data is not None and not b.bake for b in spec.bindings)]
    assert unbaked
    for spec in unbaked:
        assert all(b.exact for b in spec.bindings if b.data is not None and not b.bake)
        twins = [other for other in unbaked if other.label == spec.label and other is not spec]
        assert twins and all(codegen.render(other) == codegen.render(spec) for other in twins), spec.label
    assert any(codegen.is_baked(b) for spec in specs for b in spec.bindings)  # the unique ones keep theirs
