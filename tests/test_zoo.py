"""Zoo models against LiteRT (CPU): they load, run to sane outputs, and their hand-computed shapes are right.

The zoo writes every tensor's shape itself (the builder does no shape inference); LiteRT recomputes them in
each kernel's Prepare, so comparing the two per tensor catches a wrong padding, stride or channel count.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from gpuengine import zoo
from gpuengine.kernels.elementwise import TREE
from gpuengine.model.reader import read_model
from gpuengine.testing import assert_matches_litert, random_inputs

litert = pytest.importorskip("ai_edge_litert.interpreter")

# Op counts per type, as documented in the builders (MobileNet v1 / v2 match the TFLite-hosted float models).
EXPECTED_OPS: dict[str, dict[str, int]] = {
    "efficientnet_b0": {"CONV_2D": 65, "DEPTHWISE_CONV_2D": 16, "LOGISTIC": 65, "MUL": 65, "MEAN": 17, "ADD": 9,
                        "FULLY_CONNECTED": 1, "SOFTMAX": 1},
    "mobilenet_v1": {"CONV_2D": 15, "DEPTHWISE_CONV_2D": 13, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                     "SOFTMAX": 1},
    "mobilenet_v2": {"CONV_2D": 36, "DEPTHWISE_CONV_2D": 17, "ADD": 10, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                     "SOFTMAX": 1},
    "mobilenet_v2_int8": {"CONV_2D": 36, "DEPTHWISE_CONV_2D": 17, "ADD": 10, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                          "SOFTMAX": 1},
    "mobilenet_v3_small": {"CONV_2D": 43, "DEPTHWISE_CONV_2D": 11, "ADD": 34, "RELU6": 28, "MUL": 54, "DIV": 2,
                           "AVERAGE_POOL_2D": 10, "RESHAPE": 1, "SOFTMAX": 1},
    "segmentation": {"CONV_2D": 27, "DEPTHWISE_CONV_2D": 9, "HARD_SWISH": 7, "ADD": 5, "AVERAGE_POOL_2D": 4,
                     "LOGISTIC": 4, "MUL": 4, "RESIZE_BILINEAR": 4, "SOFTMAX": 1},
    "tiny": {"CONV_2D": 2, "DEPTHWISE_CONV_2D": 1, "ADD": 1, "RELU6": 1, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
             "SOFTMAX": 1},
}
# Float parameters. MobileNets: exactly the Keras applications' totals with batch norm folded into a conv bias
# and a 1001-class classifier, so the channel counts are the papers':
# v1: 4,253,864 - 3 * 10,944 BN channels + 1,025; v2: 3,538,984 - 3 * 17,056 + 1,281. EfficientNet-B0 and
# MobileNet v3 small (1000 classes, as Keras): 5,330,571 - 7 (input normalization) - 3 * 21,008 BN channels;
# 2,554,968 - 3 * 6,056 + 3 shared scalars (3, 6, 1/6) of the hard-swish / hard-sigmoid ops.
# The int8 MobileNet v2 holds the same parameters as int8 weights and int32 biases.
EXPECTED_PARAMS = {"mobilenet_v1": 4_222_057, "mobilenet_v2": 3_489_097, "segmentation": 101_828, "tiny": 394,
                   "efficientnet_b0": 5_267_540, "mobilenet_v3_small": 2_536_803, "mobilenet_v2_int8": 3_489_097}
IO_SHAPES = {
    "efficientnet_b0": ((1, 224, 224, 3), (1, 1000)),
    "mobilenet_v3_small": ((1, 224, 224, 3), (1, 1000)),
    "mobilenet_v1": ((1, 224, 224, 3), (1, 1001)),
    "mobilenet_v2": ((1, 224, 224, 3), (1, 1001)),
    "mobilenet_v2_int8": ((1, 224, 224, 3), (1, 1001)),
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
    with pytest.raises(KeyError, match="efficientnet_b0, mobilenet_v1, mobilenet_v2, mobilenet_v2_int8, "
                                       "mobilenet_v3_small, segmentation, tiny"):
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
    params = sum(t.size for t in graph.tensors
                 if t.data is not None and (t.dtype == np.float32 or t.quantization is not None))
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
    x = random_inputs(data, 0)[inp["index"]]
    it.set_tensor(inp["index"], x)
    it.invoke()
    y = it.get_tensor(out["index"])
    assert y.shape == IO_SHAPES[name][1]
    if np.issubdtype(y.dtype, np.integer):  # int8: its real values (a probability is a whole number of 1/256)
        scale, zero = out["quantization"]
        y = (y.astype(np.float32) - zero) * scale
        assert scale == 1 / 256
    assert np.isfinite(y).all()
    assert np.ptp(y) > 1e-3, "outputs are (nearly) all equal: activations died or saturated"
    # every model ends in a softmax (int8 ones lose up to one step per class to rounding)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-4 if y.dtype == np.float32 and out["dtype"] == np.float32
                               else 0.5)
    if y.shape[-1] > 2:
        assert y.max() < 0.9999, "a random classifier's softmax should not be one-hot"


# Activations written as ops: each becomes one ELEMENTWISE_TREE (passes/fuse_elementwise_tree.py) run in the
# epilogue of the conv producing its input; the squeeze-excitation MUL(x, gate) is evaluated by the projection
# conv while loading its input (passes/fuse_input_expression.py). (trees, prologues) per model:
# EfficientNet-B0: swish after the stem, 16 depthwise, 15 expand, 16 SE reduce convs and the head; 16 SE blocks.
# MobileNet v3 small: hard-swish after the stem, the expand and depthwise convs of 8 blocks and the two head
# convs; 9 SE blocks. Their hard-sigmoid gates are chains (one reader each), fused op by op.
FUSED_ON_GPU = {"efficientnet_b0": (49, 16), "mobilenet_v3_small": (19, 9)}


@pytest.mark.parametrize("name", sorted(FUSED_ON_GPU))
def test_gpu_runs_no_elementwise_op_on_its_own(name: str) -> None:
    it = assert_matches_litert(zoo.get(name), tol=1e-4)
    graph = it.compiled.plan.graph
    standalone = [d.spec.label for p in it.compiled.programs for d in getattr(p, "dispatches", [])
                  if d.spec.shader == "elementwise"]
    assert not standalone, f"elementwise ops dispatched on their own: {standalone}"
    trees = sum(op.code == TREE for op in graph.ops)
    prologues = sum(bool(op.opt("prologue")) for op in graph.ops)
    assert (trees, prologues) == FUSED_ON_GPU[name]


@pytest.mark.parametrize("name", ["mobilenet_v3_small"])  # EfficientNet's 241 unfused kernels cost a CI minute
def test_gpu_matches_litert_with_passes_off(name: str) -> None:
    it = assert_matches_litert(zoo.get(name), tol=1e-4, optimize=False)
    assert not any(op.code == TREE or op.opt("prologue") for op in it.compiled.plan.graph.ops)
