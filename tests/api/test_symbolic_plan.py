"""The symbolic plan (runtime/symbolic_plan.py): a new input size of the FCN and the encoder evaluated from
expressions made once -- no planning, no rendering, no shader compile -- equal to LiteRT at sizes in every shape
class, its records equal to the planner's at that size, its arena (peak-outward greedy) held against the exact
planner, and grown only when a size needs more."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from builders import encoder_model, fcn_model, runtime_reshape_model
from helpers import count_compiles, relative_error

from gpuengine import Interpreter
from gpuengine.memory.exact import plan_offsets
from gpuengine.planning import prepare
from gpuengine.runtime.program import GpuProgram
from gpuengine.runtime.symbolic_plan import Expr, SizedProgram, SymbolicPlan, shape_class

litert = pytest.importorskip("ai_edge_litert.interpreter")

CASES = {
    # sizes after the first: five new ones, then ones whose shape classes differ (skinny 3x3, fat 150x120)
    "fcn": (fcn_model, [(1, 12, 10, 3), (1, 16, 16, 3), (1, 7, 21, 3), (1, 30, 9, 3), (1, 24, 32, 3), (1, 3, 3, 3),
                        (1, 150, 120, 3), (1, 224, 224, 3)]),
    "encoder": (encoder_model, [(1, 5, 16), (1, 13, 16), (1, 3, 16), (1, 20, 16), (1, 11, 16), (1, 150, 16)]),
}


def _planned_records(it: Interpreter, shape: tuple[int, ...]) -> list[Any]:
    """The usage records the planner gives at this size (what the symbolic plan's expressions must reproduce)."""
    model = it.parsed_model
    entry = prepare(model.main, {model.main.inputs[0]: shape}, it.engine_options, model)
    part = entry.plan.partitions[0]
    first = it.symbolic_plan.template.programs[0]
    program = GpuProgram(entry.plan.graph, part.ops, part.inputs, part.outputs, first.gpu,
                         dataclasses.replace(it.engine_options, memory_strategy="offsets"), None, first.target,
                         first.precision, allocate=False)
    return program.info.records


@pytest.mark.parametrize("name", list(CASES))
def test_new_sizes_are_evaluated_not_planned_and_match_litert(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    build, shapes = CASES[name]
    data = build()
    ours, theirs = Interpreter(model_content=data), litert.Interpreter(model_content=data)
    ours.allocate_tensors()
    plan = ours.symbolic_plan
    assert isinstance(plan, SymbolicPlan), plan
    compiles = count_compiles(monkeypatch)
    classes: set[tuple[str, ...]] = set()
    ratios = []
    for k, shape in enumerate(shapes):
        for it in (ours, theirs):
            it.resize_tensor_input(0, list(shape))
            it.allocate_tensors()
        program = ours.compiled.programs[0]
        assert isinstance(program, SizedProgram)  # from the expressions: nothing planned for this size
        classes.add(tuple(program.evaluated.classes))
        x = np.random.default_rng(k).uniform(-1, 1, shape).astype(np.float32)
        for it in (ours, theirs):
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
        for d in theirs.get_output_details():
            got, ref = ours.get_tensor(d["index"]), theirs.get_tensor(d["index"])
            assert got.shape == ref.shape and relative_error(got, ref) <= 1e-4, (shape, d["name"])
        # the evaluated records are the planner's at this size, tensor for tensor
        planned = _planned_records(ours, shape)
        assert [(r.tensor, r.size, r.first, r.last) for r in program.info.records] == \
            [(r.tensor, r.size, r.first, r.last) for r in planned]
        exact = plan_offsets(planned, program.gpu.storage_alignment).total_bytes
        ratios.append(program.info.plan.total_bytes / exact)
    assert compiles == []  # every class's version compiled once, when the plan was made
    assert len(classes) > 1  # the sizes crossed shape classes
    assert max(ratios) <= 1.5, ratios  # peak-outward in the first size's order against the exact arena


@pytest.mark.parametrize("name", list(CASES))
def test_the_expressions_hold_at_sizes_never_sampled(name: str) -> None:
    """The expressions were fitted at sampled sizes; at 16 random sizes in the plan's range none of them sampled,
    every gpe_dims word, grid, binding size, table, usage record and shape equals what the planner gives there."""
    build, _ = CASES[name]
    it = Interpreter(model_content=build())
    it.allocate_tensors()
    plan = it.symbolic_plan
    assert isinstance(plan, SymbolicPlan), plan
    model = it.parsed_model
    x = model.main.inputs[0]
    rng = np.random.default_rng(7)
    declared = model.main.tensors[x].shape_signature
    checked = 0
    while checked < 16:
        env = {s: int(rng.integers(lo, hi + 1)) for s, (lo, hi) in plan.ranges.items()}
        axes = {axis: env[s] for s, (_, axis) in plan.rdp.input_axes.items()}
        shape = tuple(axes.get(k, d) for k, d in enumerate(declared))
        assert plan.check({x: shape}, model, it.engine_options) == [], shape
        checked += 1


def test_the_arena_grows_and_never_shrinks() -> None:
    ours = Interpreter(model_content=fcn_model())
    ours.allocate_tensors()
    plan = ours.symbolic_plan
    assert isinstance(plan, SymbolicPlan), plan
    sizes = []
    for shape in [(1, 40, 40, 3), (1, 10, 10, 3), (1, 120, 90, 3), (1, 20, 20, 3)]:
        ours.resize_tensor_input(0, list(shape))
        ours.allocate_tensors()
        program = ours.compiled.programs[0]
        arena = program.buffers.arena
        assert program.objects[0] is arena and arena.size >= program.info.plan.total_bytes
        sizes.append(arena.size)
    assert sizes[1] == sizes[0] and sizes[2] > sizes[1] and sizes[3] == sizes[2]


def test_sizes_outside_the_sampled_range_are_planned_as_before() -> None:
    ours = Interpreter(model_content=encoder_model())
    ours.allocate_tensors()
    plan = ours.symbolic_plan
    assert isinstance(plan, SymbolicPlan), plan
    low = plan.ranges["x[1]"][0]
    ours.resize_tensor_input(0, [1, low - 1, 16])
    ours.allocate_tensors()
    assert not isinstance(ours.compiled.programs[0], SizedProgram)


def test_shape_classes_are_named_by_rows() -> None:
    assert [shape_class(r) for r in (1, 63, 64, 4095, 4096, 10 ** 6)] == \
        ["skinny", "skinny", "regular", "regular", "fat", "fat"]


def test_the_versions_compile_with_naga_and_tint() -> None:
    """Every version of the two plans (parametric texts in each shape class's decomposition) is taken by naga
    (wgpu-native) and by Tint (Dawn), each text with its implementation's enable directives."""
    pytest.importorskip("wgpudawn", reason="the Dawn compile check needs wgpudawn (pip install 'gpuengine[dawn]')")
    from gpuengine.lowering import codegen
    from gpuengine.runtime.device import get_device
    from gpuengine.runtime.webgpu import compile_error

    texts = {}
    for build in (fcn_model, encoder_model):
        it = Interpreter(model_content=build())
        it.allocate_tensors()
        plan = it.symbolic_plan
        assert isinstance(plan, SymbolicPlan), plan
        texts.update({v.source: d.shader for d in plan.dispatches for v in d.classes.values()})
    assert len(texts) >= 10
    for webgpu in ("wgpu", "dawn"):
        device = get_device(webgpu=webgpu).device
        for source, shader in texts.items():
            text = codegen.enable_directives(source, False, webgpu) + source
            assert compile_error(device, text, pipeline=webgpu == "dawn") is None, (webgpu, shader)


def test_a_value_dependent_shape_splits_the_plan_and_inspect_says_so() -> None:
    """A RESHAPE to a target read from an input (class 3, values known only at run time) is a split point: no
    symbolic plan, each size planned (LiteRT runs the part after it), and the reason is the split."""
    from gpuengine.tools.inspect import symbolic_plan_report

    it = Interpreter(model_content=runtime_reshape_model())
    it.allocate_tensors()
    report = symbolic_plan_report(it.symbolic_plan)
    assert not report["made"] and "split points" in report["why"] and "RESHAPE" in report["why"], report


def test_a_served_size_reads_its_input_from_a_gpu_buffer() -> None:
    """set_input_buffer at a size the plan served rebinds from the evaluated sizes (SizedProgram._bind): the same
    outputs as the host upload."""
    import wgpu

    ours = Interpreter(model_content=fcn_model())
    ours.allocate_tensors()
    shape = (1, 14, 11, 3)
    ours.resize_tensor_input(0, list(shape))
    ours.allocate_tensors()
    assert isinstance(ours.compiled.programs[0], SizedProgram)
    x = np.random.default_rng(3).uniform(-1, 1, shape).astype(np.float32)
    ours.set_tensor(ours.get_input_details()[0]["index"], x)
    ours.invoke()
    want = [ours.get_tensor(d["index"]).copy() for d in ours.get_output_details()]
    device = ours.compiled.device
    buffer = device.create_buffer_with_data(data=x.tobytes(), usage=wgpu.BufferUsage.STORAGE)
    ours.set_input_buffer(0, buffer)
    ours.invoke()
    for d, w in zip(ours.get_output_details(), want):
        np.testing.assert_array_equal(ours.get_tensor(d["index"]), w)


def test_a_fitted_shape_rdp_disagrees_with_is_planned_as_before() -> None:
    """The expressions are fitted; RDP's shapes are derived from the ops' rules. A size where a fitted shape
    differs from RDP's (here one made wrong on purpose) is planned as before, never run from the misfit."""
    ours = Interpreter(model_content=encoder_model())
    ours.allocate_tensors()
    plan = ours.symbolic_plan
    assert isinstance(plan, SymbolicPlan), plan
    t, dims = next((t, dims) for t, dims in plan.source.items() if len(dims) > 1)
    plan.source[t] = (*dims[:-1], Expr((), -1))  # an expression off at every size
    shape = (1, 13, 16)
    ours.resize_tensor_input(0, list(shape))
    ours.allocate_tensors()
    assert not isinstance(ours.compiled.programs[0], SizedProgram)
    assert plan.disagreed == 1
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ours.set_tensor(ours.get_input_details()[0]["index"], x)
    ours.invoke()
    reference = litert.Interpreter(model_content=encoder_model())
    reference.resize_tensor_input(0, list(shape))
    reference.allocate_tensors()
    reference.set_tensor(reference.get_input_details()[0]["index"], x)
    reference.invoke()
    out = ours.get_output_details()[0]["index"]
    assert relative_error(ours.get_tensor(out), reference.get_tensor(reference.get_output_details()[0]["index"])) < 1e-4
