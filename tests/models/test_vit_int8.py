"""A fully int8 ViT-style encoder (zoo/quantize.py vit_tiny_int8) against LiteRT's integer kernels: every int8 op
alone (fed the int8 values LiteRT computed for it inside the model), then the whole encoder."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuengine.model.builder import write_model
from gpuengine.model.ir import Graph, Model
from gpuengine.model.reader import read_model
from gpuengine.testing import QUANTIZED_SHARE, QUANTIZED_STEPS, quantized_agreement
from gpuengine.zoo.quantize import vit_tiny_int8

litert = pytest.importorskip("ai_edge_litert.interpreter")


@pytest.fixture(scope="module")
def model() -> bytes:
    return vit_tiny_int8(0)


def builtin(data: bytes, **kwargs):
    """LiteRT's reference integer kernels (no XNNPACK), tensors allocated."""
    it = litert.Interpreter(model_content=data, **kwargs,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def image(data: bytes, seed: int) -> np.ndarray:
    shape = read_model(data).main.tensors[read_model(data).main.inputs[0]].shape
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


def single_op_model(graph: Graph, index: int) -> bytes:
    """Op `index` of `graph` alone: its run-time inputs become the model's inputs, its constants kept."""
    op, tensors, remap = graph.ops[index], [], {}

    def take(t: int) -> int:
        if t < 0:
            return -1
        if t not in remap:
            remap[t] = len(tensors)
            tensors.append(dataclasses.replace(graph.tensors[t], index=len(tensors)))
        return remap[t]

    inputs, outputs = [take(t) for t in op.inputs], [take(t) for t in op.outputs]
    runtime = [remap[t] for t in op.inputs if t >= 0 and graph.tensors[t].data is None]
    one = dataclasses.replace(op, index=0, inputs=inputs, outputs=outputs)
    return write_model(Model(subgraphs=[Graph(tensors=tensors, ops=[one], inputs=runtime, outputs=outputs)]))


def first_of_each_kind(graph: Graph) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for op in graph.ops:
        kind = op.code + ("_adj_y" if op.opt("adj_y") else "")
        kinds.setdefault(kind, op.index)
    return kinds


def test_every_int8_op_alone_matches_litert(model: bytes):
    """Each kind of int8 op, fed the int8 values LiteRT's kernels computed for it in the encoder, within the int8
    goal (QUANTIZED_STEPS on QUANTIZED_SHARE of the elements) of LiteRT's kernel run on the same values."""
    from gpuengine import Interpreter

    graph = read_model(model).main
    whole = builtin(model, experimental_preserve_all_tensors=True)
    whole.set_tensor(whole.get_input_details()[0]["index"], image(model, 3))
    whole.invoke()
    kinds = first_of_each_kind(graph)
    assert {"FULLY_CONNECTED", "BATCH_MATMUL", "BATCH_MATMUL_adj_y", "MEAN", "SQUARED_DIFFERENCE", "RSQRT", "GELU",
            "SOFTMAX", "MUL", "ADD", "SUB"} <= set(kinds)
    report = {}
    for kind, index in kinds.items():
        op = graph.ops[index]
        assert graph.tensors[op.outputs[0]].dtype == np.int8, kind
        data = single_op_model(graph, index)
        feeds = [whole.get_tensor(t) for t in op.inputs if t >= 0 and graph.tensors[t].data is None]
        results = []
        for it in (builtin(data), Interpreter(model_content=data)):
            it.allocate_tensors()
            for detail, value in zip(it.get_input_details(), feeds):
                it.set_tensor(detail["index"], value)
            it.invoke()
            results.append(it.get_tensor(it.get_output_details()[0]["index"]))
        report[kind] = quantized_agreement(results[1], results[0])
    failing = {kind: r for kind, r in report.items() if r[0] < QUANTIZED_SHARE}
    assert not failing, f"(share within {QUANTIZED_STEPS} steps, max steps): {failing}"
    # MEAN rounds as LiteRT's QuantizedMeanOrSum (kernels/reduce.py integer_requantize), SQUARED_DIFFERENCE and
    # RSQRT compute as its integer kernels (kernels/elementwise.py): exactly LiteRT's integers
    assert all(report[kind][1] == 0 for kind in ("MEAN", "SQUARED_DIFFERENCE", "RSQRT")), report


def test_int8_mul_of_two_runtime_tensors_rounds_as_litert(model: bytes):
    """An int8 MUL of two run-time tensors (LayerNorm's x * rsqrt(var)) rounds its product with LiteRT's
    MultiplyByQuantizedMultiplier (kernels/elementwise.py integer_requantize): LiteRT's integers exactly."""
    from gpuengine import Interpreter

    graph = read_model(model).main
    index = next(op.index for op in graph.ops if op.code == "MUL"
                 and all(graph.tensors[t].data is None for t in op.inputs))
    whole = builtin(model, experimental_preserve_all_tensors=True)
    whole.set_tensor(whole.get_input_details()[0]["index"], image(model, 5))
    whole.invoke()
    data = single_op_model(graph, index)
    results = []
    for it in (builtin(data), Interpreter(model_content=data)):
        it.allocate_tensors()
        for detail, t in zip(it.get_input_details(), graph.ops[index].inputs):
            it.set_tensor(detail["index"], whole.get_tensor(t))
        it.invoke()
        results.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert results[0].size >= 4096 and len(np.unique(results[0])) > 50
    np.testing.assert_array_equal(results[1], results[0])


@pytest.mark.xfail(strict=False, reason=(
    "passes/fuse_attention.py fuses the int8 QK^T, scale, SOFTMAX, ·V chain into one ATTENTION op computed in float: "
    "the int8 scores (scale ~0.67) and probabilities (1/256) LiteRT rounds to are lost (8-81 steps off, argmax "
    "differs on 2 of 8 inputs). Fix: fuse_attention leaves quantized chains alone; unfused the encoder is 1-7 steps "
    "from LiteRT's builtin kernels (argmax agreeing on 7 of 8, the 8th a near-tie; LiteRT's XNNPACK is 2-11 steps "
    "from them), short of 2 steps on 99%: FULLY_CONNECTED / BATCH_MATMUL (kernels/fully_connected.py) round once "
    "where LiteRT rounds twice (1 step on 0.2-0.4% of elements), and 4 layers amplify it"))
def test_whole_int8_encoder_matches_litert(model: bytes):
    """The whole int8 encoder on the GPU: the int8 goal on its int8 probabilities, argmax agreeing."""
    from gpuengine import Interpreter

    reference, ours = builtin(model), Interpreter(model_content=model)
    ours.allocate_tensors()
    for seed in range(2):
        results = []
        for it in (reference, ours):
            it.set_tensor(it.get_input_details()[0]["index"], image(model, seed))
            it.invoke()
            results.append(it.get_tensor(it.get_output_details()[0]["index"]))
        share, steps = quantized_agreement(results[1], results[0])
        assert np.argmax(results[1]) == np.argmax(results[0]), seed
        assert share >= QUANTIZED_SHARE, (seed, share, steps)
