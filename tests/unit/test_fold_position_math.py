"""passes/fold_position_math.py (and passes/choose_attention_split.py, which runs after it) on two litert-torch
exports (tests/fixtures/litert_torch): the decode step's position math (RoPE angles, the mask row, the cache offsets)
leaves the graph, and what its readers now read means the same values as the ops it replaced, checked against the
float64 reference of those ops for positions inside and outside the cache (negative ones wrapped, out-of-range ones
filled) and at the sliding window's edges. No GPU, no LiteRT."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, SHARED_MODELS

import gpuengine.lowering.kernels  # noqa: F401  (installs the kernel registry the passes ask)
from gpuengine.model.ir import Graph
from gpuengine.model.ops import (
    ATTENTION,
    GROUPS,
    KV_CACHE_WRITE,
    MASK_FROM_POSITION,
    OFFSETS_FROM_POSITION,
    QUERY,
    ROPE_ANGLES,
)
from gpuengine.model.reader import read_model
from gpuengine.passes.fold_position_math import fold_position_math
from gpuengine.passes.pipeline import OPTIONAL, REQUIRED, WITH_DEVICE, WITH_MODEL
from gpuengine.reference import run_reference

POSITIONS = [-300, -101, -100, -65, -64, -50, -1, 0, 1, 15, 16, 17, 37, 63, 64, 99, 100, 255, 256, 1000]
POSITION_CODES = {"CAST", "COS", "SIN", "LESS", "SELECT", "GREATER_EQUAL", "LESS_EQUAL", "REDUCE_ALL", "GATHER_ND",
                  "PACK"}


def before_fold(name: str) -> Graph:
    """The decode graph as the pipeline hands it to fold_position_math."""
    path = FIXTURES / "litert_torch" / f"{name}.tflite"
    if not path.exists():
        path = SHARED_MODELS / f"{name}.tflite"
        if not path.exists():
            pytest.skip(f"{path} is absent (the shared test models)")
    model = read_model(path.read_bytes())
    graph = model.subgraphs[{s.key: s.subgraph for s in model.signatures}["decode"]]
    for with_model in WITH_MODEL:
        graph = with_model(graph, model)
    for p in REQUIRED:
        graph = p(graph)
    for p in OPTIONAL[:OPTIONAL.index(fold_position_math)]:
        graph = p(graph, None) if p in WITH_DEVICE else p(graph)
    return graph


def evaluate(graph: Graph, position_input: int, targets: list[int], position: int) -> dict[int, np.ndarray]:
    """The float64 values of `targets` for one position: the ops they depend on, run alone."""
    producers = graph.producers()
    needed, pending = set(), list(targets)
    while pending:
        t = pending.pop()
        if t in producers and producers[t] not in needed:
            needed.add(producers[t])
            pending += [i for i in graph.ops[producers[t]].inputs if i >= 0]
    ops = [graph.ops[i] for i in sorted(needed)]
    sub = Graph(graph.tensors, ops, [position_input], list(targets))
    return run_reference(sub, {position_input: np.array([position], np.int32)})


def mask_row(table: np.ndarray, wrap: bool, window: tuple | None, position: int) -> np.ndarray:
    """What MASK_FROM_POSITION says the kernel reads (kernels/attention.py)."""
    rows = table.shape[0] - 1
    p = position + rows if wrap and position < 0 else position
    row = table[p if 0 <= p < rows else rows]
    if window is None:
        return row
    below, above, inside, outside, row_first = window
    j = np.arange(row.size)
    values = np.where((j > position - below) & (j < position + above), inside, outside).astype(np.float32)
    return np.minimum(row, values) if row_first else np.minimum(values, row)


@pytest.mark.parametrize("name", ["llama32_2l_f32_bnth", "gemma3_1b_2l_f32", "toy_decoder_kv"])
def test_position_math_folds_into_its_readers_with_the_same_values(name: str):
    graph = before_fold(name)
    position_input = graph.inputs[1]
    assert graph.tensors[position_input].name.endswith("input_pos")
    after = fold_position_math(graph)
    assert len(after.ops) < len(graph.ops)
    assert f"position math: {len(graph.ops) - len(after.ops)} ops" in after.remarks[-1]  # what inspect shows
    old = {op.outputs[0]: op for op in graph.ops if op.code in (KV_CACHE_WRITE, ATTENTION)}
    folded = [op for op in after.ops if op.code in (KV_CACHE_WRITE, ATTENTION)]
    windows: list[tuple | None] = []
    assert len(folded) == len(old) == 4
    for op in folded:
        before = old[op.outputs[0]]
        if op.code == KV_CACHE_WRITE:
            # angles from frequencies (litert-torch), or rows of cos / sin tables (the toy decoder)
            assert op.opt(ROPE_ANGLES) == (("rows", True) if name == "toy_decoder_kv" else True)
            first, targets, checks = 0, [], []
            for g, (count, _steps, rope, *kind) in enumerate(op.opt(GROUPS)):
                tables = first + (1 if kind == [QUERY] else 3)
                if rope or kind == [QUERY]:
                    assert op.inputs[tables] == position_input
                    data = np.asarray(after.tensors[op.inputs[tables + 1]].data, np.float32)
                    targets += before.inputs[tables:tables + 2]
                    checks.append(("angles" if op.opt(ROPE_ANGLES) is True else "rows", data))
                if kind != [QUERY]:
                    assert op.inputs[first + 2] == position_input
                    targets.append(before.inputs[first + 2])
                    checks.append(("offsets", op.opt(OFFSETS_FROM_POSITION)[g]))
                first += count
            rows = graph.tensors[before.inputs[0]].shape[1]  # the cache's length, the tables' rows
            for p in POSITIONS:
                if any(kind_ == "rows" for kind_, _ in checks) and not -rows <= p < rows:
                    continue  # the reference refuses GATHER_ND out of range (the mask's check covers the fill)
                values = evaluate(graph, position_input, targets, p)
                got = iter(values[t] for t in targets)
                for kind_, data in checks:
                    if kind_ == "rows":
                        row = mask_row(data, True, None, p)
                        np.testing.assert_array_equal(next(got).reshape(-1), row[:row.size // 2])
                        np.testing.assert_array_equal(next(got).reshape(-1), row[row.size // 2:])
                    elif kind_ == "angles":
                        # the reference multiplies in float64, the kernel (as the MUL kernel did) in f32
                        angle, tolerance = np.float64(p) * data, 1e-7 * max(1, abs(p))
                        np.testing.assert_allclose(next(got), np.cos(angle), atol=tolerance)
                        np.testing.assert_allclose(next(got), np.sin(angle), atol=tolerance)
                    else:
                        assert list(next(got)) == [p if v is None else v for v in data]
        elif op.opt(MASK_FROM_POSITION) is not None:
            shape, wrap, window = op.opt(MASK_FROM_POSITION)
            assert op.inputs[:3] == before.inputs[:3] and op.inputs[4] == position_input
            table = np.asarray(after.tensors[op.inputs[3]].data)
            rows = table.shape[0] - 1
            for p in POSITIONS:
                if -rows <= p < rows:
                    want = evaluate(graph, position_input, [before.inputs[3]], p)[before.inputs[3]]
                    np.testing.assert_array_equal(mask_row(table, wrap, window, p).reshape(shape), want)
                else:  # the reference refuses GATHER_ND out of range, which SELECT_V2 replaces by its fill, NaN
                    with pytest.raises(ValueError, match="GATHER_ND"):
                        evaluate(graph, position_input, [before.inputs[3]], p)
                    assert np.isnan(mask_row(table, wrap, window, p)).all()
            windows.append(window)
    assert len(windows) == 2  # every attention's mask
    assert len({op.inputs[3] for op in folded if op.code == ATTENTION}) == 1  # one table for the layers' masks
    # Gemma 3's first layer is a local one: the row's minimum with a sliding window of 16 on each side
    assert [w[:2] if w else None for w in windows] == ([(16, 16), None] if name.startswith("gemma") else [None] * 2)
    assert not {op.code for op in after.ops} & POSITION_CODES


def test_a_graph_without_the_pattern_is_returned_unchanged():
    graph = before_fold("llama32_2l_f32_bnth")
    graph.ops = [op for op in graph.ops if op.code not in (KV_CACHE_WRITE, ATTENTION)]
    assert fold_position_math(graph) is graph


def test_choose_attention_split_follows_the_latency_model():
    """A decode attention over 64 keys: one workgroup a row where the h100 description predicts it faster than
    flash-decoding's key chunks (each one dispatch: the last chunk of a row merges it), with a remark saying so;
    no description, no change."""
    from gpuengine.latency import devices
    from gpuengine.model.ops import ONE_DISPATCH
    from gpuengine.passes import kernel_support
    from gpuengine.passes.choose_attention_split import choose_attention_split
    from gpuengine.passes.graph_utils import with_fields

    graph = fold_position_math(before_fold("llama32_2l_f32_bnth"))
    assert choose_attention_split(graph) is graph
    device = devices.built_in("h100")
    after = choose_attention_split(graph, device)
    attentions = [op for op in graph.ops if op.code == ATTENTION]
    chosen = [op for op in after.ops if op.code == ATTENTION]
    assert len(attentions) == len(chosen) == 2
    for op, new in zip(attentions, chosen):
        split_ns, dispatches = kernel_support.op_ns(op, graph, device)
        one_ns, one = kernel_support.op_ns(with_fields(op, **{ONE_DISPATCH: True}), graph, device)
        assert (dispatches, one) == (1, 1) and one_ns != split_ns
        assert bool(new.opt(ONE_DISPATCH)) == (one_ns < split_ns)
    assert any(r.startswith("ATTENTION (2x)") and "latency model" in r for r in after.remarks), after.remarks
