"""State carried from call to call on the GPU: an input bound to its own program's output buffer reads the
previous call's value (copied on the GPU at the start of each call), for the Interpreter and SignatureRunner."""

from __future__ import annotations

import numpy as np
import pytest

from gpuengine.model.builder import ModelBuilder, write_model
from gpuengine.model.ir import SignatureDef


def halve_and_add_one() -> bytes:
    mb = ModelBuilder()
    x = mb.input("state", (1, 5))
    half = mb.op("MUL", [x, mb.const("half", np.full((1, 5), 0.5, np.float32))], (1, 5))
    mb.output(mb.op("ADD", [half, mb.const("one", np.ones((1, 5), np.float32))], (1, 5)))
    return mb.build()


def test_interpreter_input_fed_by_its_own_output():
    from gpuengine import Interpreter

    it = Interpreter(model_content=halve_and_add_one())
    it.allocate_tensors()
    x = np.arange(5, dtype=np.float32).reshape(1, 5) * 8
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    it.set_input_buffer(0, it.output_buffer(0))  # from now on: state = f(state) on the GPU
    for _ in range(3):
        it.invoke()
    # binding again re-records the command buffers (the old ones are submitted as orphans): no extra step
    it.set_input_buffer(0, it.output_buffer(0))
    it.invoke_async(read_outputs=False).result()
    it.invoke()
    expect = x
    for _ in range(6):
        expect = expect * 0.5 + 1
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), expect, rtol=1e-6)
    program = it.compiled.gpu_programs[0]
    assert program.uploaded == {}  # nothing written from the host once the state is on the GPU


def test_signature_runner_buffer_api_checks_names_and_types():
    from gpuengine import Interpreter

    mb = ModelBuilder()
    ids = mb.input("ids", (2,), np.int32)
    table = mb.input("table", (4, 3))
    mb.output(mb.op("EMBEDDING_LOOKUP", [ids, table], (2, 3)))
    model = mb.to_model()
    model.signatures = [SignatureDef(key="lookup", subgraph=0, inputs={"ids": ids, "table": table},
                                  outputs={"rows": model.main.outputs[0]})]
    runner = Interpreter(model_content=write_model(model)).get_signature_runner("lookup")
    values = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    out = runner.run({"ids": np.array([3, 0], np.int32), "table": values}, outputs=["rows"])
    np.testing.assert_allclose(out["rows"], values[[3, 0]], rtol=0, atol=1e-6)
    runner.set_input_buffer("table", runner.input_buffer("table"))  # the table stays where it was uploaded
    again = runner.run({"ids": np.array([1, 2], np.int32)})
    np.testing.assert_allclose(again["rows"], values[[1, 2]], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="not an input"):
        runner.input_buffer("nope")
    with pytest.raises(ValueError, match="is int32, the buffer holds float32"):
        runner.set_input_buffer("ids", runner.output_buffer("rows"))
    with pytest.raises(ValueError, match="Invalid output name"):
        runner.run({"ids": np.array([1, 2], np.int32)}, outputs=["logits"])
    with pytest.raises(ValueError, match="Missing inputs"):
        runner.set_input_buffer("table", None)
        runner.run({"ids": np.array([1, 2], np.int32)})
    with pytest.raises(RuntimeError, match=r"Got 4, and bounds are \[0, 3\].*'ids'"):
        runner.run({"ids": np.array([1, 4], np.int32), "table": values})
