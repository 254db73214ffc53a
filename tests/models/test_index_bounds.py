"""Indices out of bounds that come from the host (token ids, positions) raise LiteRT's exception before anything
runs on the GPU (runtime/bounds.py); the shader clamp only holds for indices computed on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.model.builder import ModelBuilder


def embedding_model(vocab: int = 11, reshape: bool = False) -> tuple[bytes, int]:
    """ids (n,) -> EMBEDDING_LOOKUP of a (vocab, 6) table; reshape: ids arrive as (1, n) through a RESHAPE."""
    mb = ModelBuilder()
    table = mb.const("table", np.random.default_rng(0).standard_normal((vocab, 6)).astype(np.float32))
    if reshape:
        ids = mb.input("token_ids", (1, 3), np.int32)
        flat = mb.op("RESHAPE", [ids, mb.const("shape", np.array([3], np.int32))], (3,), dtype=np.int32)
    else:
        ids = flat = mb.input("token_ids", (3,), np.int32)
    mb.output(mb.op("EMBEDDING_LOOKUP", [flat, table], (3, 6)))
    return mb.build(), ids


def gather_nd_model() -> tuple[bytes, int]:
    """A (10, 4) table read at positions normalized as litert-torch does: pos < 0 ? pos + 10 : pos."""
    mb = ModelBuilder()
    table = mb.const("rope", np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32))
    pos = mb.input("input_pos", (2,), np.int32)
    negative = mb.op("LESS", [pos, mb.const("zero", np.zeros(2, np.int32))], (2,), dtype=np.bool_)
    shifted = mb.op("ADD", [pos, mb.const("ten", np.full(2, 10, np.int32))], (2,), dtype=np.int32)
    normal = mb.op("SELECT", [negative, shifted, pos], (2,), dtype=np.int32)
    index = mb.op("RESHAPE", [normal, mb.const("shape", np.array([2, 1], np.int32))], (2, 1), dtype=np.int32)
    mb.output(mb.op("GATHER_ND", [table, index], (2, 4)))
    return mb.build(), pos


def gather_model(vocab: int = 13) -> tuple[bytes, int]:
    """[1, 4] token ids fixed up as converters do (ids < 0 ? ids + vocab : ids), then GATHER of a (vocab, 8) table."""
    mb = ModelBuilder()
    table = mb.const("words", np.random.default_rng(3).standard_normal((vocab, 8)).astype(np.float32))
    ids = mb.input("input_ids", (1, 4), np.int32)
    negative = mb.op("LESS", [ids, mb.const("zero", np.array(0, np.int32))], (1, 4), dtype=np.bool_)
    shifted = mb.op("ADD", [ids, mb.const("vocab", np.array(vocab, np.int32))], (1, 4), dtype=np.int32)
    fixed = mb.op("SELECT_V2", [negative, shifted, ids], (1, 4), dtype=np.int32)
    mb.output(mb.op("GATHER", [table, fixed], (1, 4, 8), {"axis": 0}))
    return mb.build(), ids


def run_both(model: bytes, t: int, value: np.ndarray) -> tuple[object, object]:
    """(gpuengine's outputs or exception, LiteRT's outputs or exception)."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT

    from gpuengine import Interpreter

    results = []
    for cls in (Interpreter, LiteRT):
        interpreter = cls(model_content=model)
        interpreter.allocate_tensors()
        interpreter.set_tensor(t, value)
        try:
            interpreter.invoke()
            results.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
        except Exception as e:  # noqa: BLE001 - compared below
            results.append(e)
    return results[0], results[1]


@pytest.mark.parametrize("reshape", [False, True])
@pytest.mark.parametrize("ids", [[0, 11, 2], [-1, 0, 0], [3, 4, 10]])
def test_embedding_lookup_ids_checked_as_litert(reshape: bool, ids: list[int]):
    model, t = embedding_model(reshape=reshape)
    ours, theirs = run_both(model, t, np.array(ids, np.int32).reshape((1, 3) if reshape else (3,)))
    if max(ids) < 11 and min(ids) >= 0:
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
        return
    assert isinstance(theirs, RuntimeError) and "Embedding Lookup: index out of bounds" in str(theirs)
    assert isinstance(ours, RuntimeError), ours
    bad = next(v for v in ids if not 0 <= v < 11)
    assert f"Embedding Lookup: index out of bounds. Got {bad}, and bounds are [0, 10]" in str(ours)
    assert "(EMBEDDING_LOOKUP)" in str(ours) and "'token_ids'" in str(ours) and "valid [0, 10]" in str(ours)


@pytest.mark.parametrize("positions,error", [([0, 9], None), ([-1, -10], None), ([10, 0], "out of bounds"),
                                             ([3, -11], "indices_has_only_positive_elements")])
def test_gather_nd_positions_through_integer_ops(positions: list[int], error: str | None):
    """The index is computed from the input by LESS / ADD / SELECT / RESHAPE: evaluated on the host, checked."""
    model, t = gather_nd_model()
    ours, theirs = run_both(model, t, np.array(positions, np.int32))
    if error is None:
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
        return
    assert isinstance(theirs, RuntimeError) and error in str(theirs) and "(GATHER_ND)" in str(theirs)
    assert isinstance(ours, RuntimeError), ours
    assert error in str(ours) and "(GATHER_ND)" in str(ours) and "computed from input 'input_pos'" in str(ours)


@pytest.mark.parametrize("ids,error", [([0, 12, 5, 1], None), ([-1, -13, 0, 2], None),
                                       ([0, 13, 1, 1], "gather index out of bounds"),
                                       ([3, -14, 0, 0], "indices_has_only_positive_elements")])
def test_gather_token_ids_through_negative_index_fixup(ids: list[int], error: str | None):
    """GATHER's ids (through LESS / ADD / SELECT_V2) are checked on the host: LiteRT's error, the op's node number,
    the input named; valid ids (negative ones from the end too) match LiteRT."""
    from gpuengine import Interpreter

    model, t = gather_model()
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    plan = interpreter.compiled.plan
    assert all(p.device != "cpu" for p in plan.partitions), "the fix-up and GATHER run on the GPU"
    ours, theirs = run_both(model, t, np.array([ids], np.int32))
    if error is None:
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
        return
    assert isinstance(theirs, RuntimeError) and error in str(theirs) and "Node number 3 (GATHER)" in str(theirs)
    assert isinstance(ours, RuntimeError), ours
    assert error in str(ours) and "gather index out of bounds" in str(ours)
    assert "Node number 3 (GATHER)" in str(ours) and "computed from input 'input_ids'" in str(ours)
    assert "valid [0, 12]" in str(ours)


def test_check_runs_before_upload_and_interpreter_stays_usable():
    """invoke_async checks its feeds too; a failed call leaves nothing behind: the next valid one is right."""
    from gpuengine import Interpreter

    model, t = embedding_model()
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    with pytest.raises(RuntimeError, match="EMBEDDING_LOOKUP"):
        interpreter.invoke_async({t: np.array([1, 2, 99], np.int32)})
    ok = np.array([1, 2, 10], np.int32)
    ours, theirs = run_both(model, t, ok)
    got = interpreter.invoke_async({t: ok}).result()
    np.testing.assert_allclose(next(iter(got.values())), theirs, rtol=0, atol=1e-6)


def test_indices_computed_from_floats_are_clamped_on_the_gpu():
    """ids = CAST(a float input): a cone through floats is not evaluated on the host; the shader clamps the id
    into the table (never reading outside a buffer), so an id past the end reads the last row."""
    from gpuengine import Interpreter
    from gpuengine.runtime.bounds import IndexChecks

    mb = ModelBuilder()
    values = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    x = mb.input("x", (2,))
    ids = mb.op("CAST", [x], (2,), dtype=np.int32)
    mb.output(mb.op("EMBEDDING_LOOKUP", [ids, mb.const("table", values)], (2, 4)))
    interpreter = Interpreter(model_content=mb.build())
    interpreter.allocate_tensors()
    assert not IndexChecks(interpreter.compiled.source)
    interpreter.set_tensor(x, np.array([1.0, 7.0], np.float32))
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, values[[1, 4]], rtol=0, atol=1e-6)
