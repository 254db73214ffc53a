"""Zoo models against LiteRT (CPU): they load, run to sane outputs, and their hand-computed shapes are right.

The zoo writes every tensor's shape itself (the builder does no shape inference); LiteRT recomputes them in
each kernel's Prepare, so comparing the two per tensor catches a wrong padding, stride or channel count.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from gpuengine import zoo
from gpuengine.model.reader import read_model

litert = pytest.importorskip("ai_edge_litert.interpreter")

# Op counts per type, as documented in the builders (MobileNet v1 / v2 match the TFLite-hosted float models).
EXPECTED_OPS: dict[str, dict[str, int]] = {
    "mobilenet_v1": {"CONV_2D": 15, "DEPTHWISE_CONV_2D": 13, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                     "SOFTMAX": 1},
    "mobilenet_v2": {"CONV_2D": 36, "DEPTHWISE_CONV_2D": 17, "ADD": 10, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                     "SOFTMAX": 1},
    "segmentation": {"CONV_2D": 27, "DEPTHWISE_CONV_2D": 9, "HARD_SWISH": 7, "ADD": 5, "AVERAGE_POOL_2D": 4,
                     "LOGISTIC": 4, "MUL": 4, "RESIZE_BILINEAR": 4, "SOFTMAX": 1},
    "tiny": {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 1, "ADD": 1, "RELU6": 1, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
             "SOFTMAX": 1},
}
# Float parameters. MobileNets: exactly the Keras applications' totals with batch norm folded into a conv bias
# and a 1001-class classifier, so the channel counts are the papers':
# v1: 4,253,864 - 3 * 10,944 BN channels + 1,025; v2: 3,538,984 - 3 * 17,056 + 1,281.
EXPECTED_PARAMS = {"mobilenet_v1": 4_222_057, "mobilenet_v2": 3_489_097, "segmentation": 101_828, "tiny": 394}
IO_SHAPES = {
    "mobilenet_v1": ((1, 224, 224, 3), (1, 1001)),
    "mobilenet_v2": ((1, 224, 224, 3), (1, 1001)),
    "segmentation": ((1, 256, 256, 3), (1, 256, 256, 2)),
    "tiny": ((1, 32, 32, 3), (1, 10)),
}


def _litert(data: bytes) -> object:
    """LiteRT, builtin kernels only: a delegate would skip the Prepare that recomputes intermediate shapes."""
    it = litert.Interpreter(model_content=data, num_threads=2,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def test_registry() -> None:
    assert set(zoo.MODELS) == set(EXPECTED_OPS)
    assert zoo.DEFAULT in zoo.MODELS
    with pytest.raises(KeyError, match="mobilenet_v1, mobilenet_v2, segmentation, tiny"):
        zoo.get("resnet50")
    assert zoo.get("tiny") is zoo.get("tiny", seed=0)  # cached in-process


def test_seeds() -> None:
    assert zoo.tiny(0) == zoo.tiny(0) == zoo.MODELS["tiny"]()
    a, b = read_model(zoo.tiny(0)).subgraphs[0], read_model(zoo.tiny(1)).subgraphs[0]
    wa, wb = a.ops[0].inputs[1], b.ops[0].inputs[1]
    assert not np.array_equal(a.tensors[wa].data, b.tensors[wb].data)


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_structure(name: str) -> None:
    graph = read_model(zoo.get(name)).subgraphs[0]
    assert dict(collections.Counter(op.code for op in graph.ops)) == EXPECTED_OPS[name]
    params = sum(t.size for t in graph.tensors if t.data is not None and t.dtype == np.float32)
    assert params == EXPECTED_PARAMS[name]
    (i,), (o,) = graph.inputs, graph.outputs
    assert (graph.tensors[i].shape, graph.tensors[o].shape) == IO_SHAPES[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_runs_in_litert_with_declared_shapes(name: str) -> None:
    data = zoo.get(name)
    graph = read_model(data).subgraphs[0]
    it = _litert(data)
    details = {d["index"]: d for d in it.get_tensor_details()}
    for t in graph.tensors:
        d = details[t.index]
        assert tuple(int(s) for s in d["shape"]) == t.shape, f"{name}: tensor {t.index} {t.name!r}"
        assert np.dtype(d["dtype"]) == t.dtype, f"{name}: tensor {t.index} {t.name!r}"

    (inp,), (out,) = it.get_input_details(), it.get_output_details()
    x = np.random.default_rng(0).uniform(-1.0, 1.0, inp["shape"]).astype(np.float32)
    it.set_tensor(inp["index"], x)
    it.invoke()
    y = it.get_tensor(out["index"])
    assert y.shape == IO_SHAPES[name][1]
    assert np.isfinite(y).all()
    assert np.ptp(y) > 1e-3, "outputs are (nearly) all equal: activations died or saturated"
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-4)  # every model ends in a softmax
    if y.shape[-1] > 2:
        assert y.max() < 0.9999, "a random classifier's softmax should not be one-hot"
