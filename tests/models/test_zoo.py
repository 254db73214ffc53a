"""Zoo models against LiteRT (CPU): they load, run to sane outputs, and their hand-computed shapes are right.

The zoo writes every tensor's shape itself (the builder does no shape inference); LiteRT recomputes them in
each kernel's Prepare, so comparing the two per tensor catches a wrong padding, stride or channel count.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from helpers import assert_matches_litert, random_inputs

from gpuengine import zoo
from gpuengine.model.ops import ELEMENTWISE_TREE as TREE
from gpuengine.model.reader import read_model
from gpuengine.oracle import litert_interpreter
from gpuengine.zoo import bert

litert = pytest.importorskip("ai_edge_litert.interpreter")

# Op counts per type, as documented in the builders (MobileNet v1 / v2 match the TFLite-hosted float models).
EXPECTED_OPS: dict[str, dict[str, int]] = {
    # the ids fix-up (LESS, ADD, SELECT_V2), 3 embedding GATHERs, 5 LayerNorms in four forms, 2 attention blocks
    "bert_tiny": {"LESS": 1, "ADD": 18, "SELECT_V2": 1, "GATHER": 3, "MEAN": 10, "SQUARED_DIFFERENCE": 3, "RSQRT": 4,
                  "MUL": 15, "SUB": 4, "FULLY_CONNECTED": 13, "RESHAPE": 8, "TRANSPOSE": 8, "BATCH_MATMUL": 4,
                  "SOFTMAX": 2, "NEG": 1, "GELU": 2, "SQRT": 1, "DIV": 1, "SQUARE": 1, "STRIDED_SLICE": 1, "TANH": 1},
    # the prefill_8 signature's subgraph, op for op as litert-torch writes one (tests/models/test_decoder_zoo.py
    # compares with its SmolLM export): embedding, RoPE angles, the mask's range check and GATHER_ND, the cache
    # index; layer 0 whole (RMSNorm composites, fused QKV + SLICEs, RoPE of q and k, 2 DUS, the attention composite,
    # 4 more FCs), layer 1 up to its cache writes (what the converter keeps: prefill outputs only the cache)
    "decoder_tiny": {"RESHAPE": 11, "EMBEDDING_LOOKUP": 1, "CAST": 1, "MUL": 15, "COS": 1, "SIN": 1, "LESS": 1,
                     "ADD": 6, "SELECT": 1, "GREATER_EQUAL": 1, "LESS_EQUAL": 1, "LOGICAL_AND": 1, "REDUCE_ALL": 1,
                     "GATHER_ND": 1, "SELECT_V2": 1, "SLICE": 12, "PACK": 1, "STABLEHLO_COMPOSITE": 4,
                     "FULLY_CONNECTED": 6, "TRANSPOSE": 6, "SUB": 3, "CONCATENATION": 3, "DYNAMIC_UPDATE_SLICE": 4,
                     "LOGISTIC": 1},
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
    # 9 LayerNorms in four forms, 4 attention blocks (3 head splits, a K transpose in 2 of them, a merge each)
    "vit_tiny": {"CONV_2D": 1, "RESHAPE": 17, "ADD": 29, "MEAN": 19, "SQUARED_DIFFERENCE": 5, "RSQRT": 7, "MUL": 27,
                 "SUB": 7, "FULLY_CONNECTED": 25, "TRANSPOSE": 18, "BATCH_MATMUL": 8, "SOFTMAX": 5, "NEG": 2,
                 "GELU": 4, "SQRT": 2, "DIV": 2, "SQUARE": 2},
}
# Float parameters. MobileNets: exactly the Keras applications' totals with batch norm folded into a conv bias
# and a 1001-class classifier, so the channel counts are the papers':
# v1: 4,253,864 - 3 * 10,944 BN channels + 1,025; v2: 3,538,984 - 3 * 17,056 + 1,281. EfficientNet-B0 and
# MobileNet v3 small (1000 classes, as Keras): 5,330,571 - 7 (input normalization) - 3 * 21,008 BN channels;
# 2,554,968 - 3 * 6,056 + 3 shared scalars (3, 6, 1/6) of the hard-swish / hard-sigmoid ops.
# The int8 MobileNet v2 holds the same parameters as int8 weights and int32 biases.
EXPECTED_PARAMS = {"mobilenet_v1": 4_222_057, "mobilenet_v2": 3_489_097, "segmentation": 101_828, "tiny": 394,
                   "efficientnet_b0": 5_267_540, "mobilenet_v3_small": 2_536_803, "mobilenet_v2_int8": 3_489_097,
                   "vit_tiny": 151_127, "bert_tiny": 137_415, "decoder_tiny": 95_457}
IO_SHAPES = {
    "efficientnet_b0": ((1, 224, 224, 3), (1, 1000)),
    "mobilenet_v3_small": ((1, 224, 224, 3), (1, 1000)),
    "mobilenet_v1": ((1, 224, 224, 3), (1, 1001)),
    "mobilenet_v2": ((1, 224, 224, 3), (1, 1001)),
    "mobilenet_v2_int8": ((1, 224, 224, 3), (1, 1001)),
    "segmentation": ((1, 256, 256, 3), (1, 256, 256, 2)),
    "tiny": ((1, 32, 32, 3), (1, 10)),
    "vit_tiny": ((1, 64, 64, 3), (1, 10)),
}
# Models with several inputs or outputs: ([input shapes], [output shapes]).
MULTI_IO = {"bert_tiny": ([(1, 32), (1, 32)], [(1, 32, 64), (1, 64)]),
            "decoder_tiny": ([(1, 8), (8,), *[(1, 32, 1, 64)] * 4], [(1, 32, 1, 64)] * 4)}
# Language models: run through their signatures in tests/models/test_decoder_zoo.py.
SIGNATURE_MODELS = {"decoder_tiny"}


def io_shapes(name: str) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    if name in MULTI_IO:
        return MULTI_IO[name]
    return [IO_SHAPES[name][0]], [IO_SHAPES[name][1]]


def feeds_for(name: str, data: bytes) -> dict[int, np.ndarray]:
    """Seeded inputs; bert_tiny's token ids drawn over its whole vocabulary (some written negatively)."""
    if name != "bert_tiny":
        return random_inputs(data, 0)
    ids, types = bert.token_ids(0)
    graph = read_model(data).subgraphs[0]
    return {graph.inputs[0]: ids, graph.inputs[1]: types}


def _litert(data: bytes) -> object:
    """LiteRT, builtin kernels only: a delegate would skip the Prepare that recomputes intermediate shapes."""
    it = litert_interpreter(data, builtin=True, num_threads=2)
    return it


def test_registry() -> None:
    assert set(zoo.MODELS) == set(EXPECTED_OPS)
    assert zoo.DEFAULT in zoo.MODELS
    with pytest.raises(KeyError, match="bert_tiny, decoder_tiny, efficientnet_b0, mobilenet_v1, mobilenet_v2, "
                                       "mobilenet_v2_int8, mobilenet_v3_small, segmentation, tiny, vit_tiny"):
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
    shapes = ([graph.tensors[t].shape for t in graph.inputs], [graph.tensors[t].shape for t in graph.outputs])
    assert shapes == io_shapes(name)


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
    if name in SIGNATURE_MODELS:
        return

    feeds = feeds_for(name, data)
    for d in it.get_input_details():
        it.set_tensor(d["index"], feeds[d["index"]])
    it.invoke()
    if name in MULTI_IO:  # an encoder: its outputs are features, not probabilities
        for d, shape in zip(it.get_output_details(), io_shapes(name)[1]):
            y = it.get_tensor(d["index"])
            assert y.shape == shape and np.isfinite(y).all() and np.ptp(y) > 1e-3
        return
    (out,) = it.get_output_details()
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


def test_vit_tiny_runs_fused_on_the_gpu() -> None:
    """Each LayerNorm one LAYER_NORM dispatch, each attention block one ATTENTION dispatch reading the projections
    through layout views (no copy for a RESHAPE or TRANSPOSE), Q/K/V one FULLY_CONNECTED: at most 40 dispatches."""
    it = assert_matches_litert(zoo.get("vit_tiny"), tol=1e-4)
    labels = [d.spec.label for p in it.compiled.gpu_programs for d in p.dispatches]
    shaders = [d.spec.shader for p in it.compiled.gpu_programs for d in p.dispatches]
    if not it.compiled.options.optimize:  # GPUENGINE_OPTIMIZE=0: every op as written
        return
    assert len(labels) <= 40, labels
    assert sum(label.startswith("LAYER_NORM") for label in labels) == 9, labels
    assert sum(label.startswith("ATTENTION") and "views q+k+v+out" in label for label in labels) == 4, labels
    assert "copy" not in shaders, labels
    # the position embedding ADD after the patch RESHAPE (an alias, which epilogue fusion does not look through)
    assert shaders.count("elementwise") == 1, labels
    assert sum("64x64->192" in label for label in labels) == 4, labels


def test_vit_tiny_attention_is_not_uniform() -> None:
    """The random weights give peaked attention rows (a uniform row over 64 tokens has maximum 1/64)."""
    data = zoo.get("vit_tiny")
    graph = read_model(data).subgraphs[0]
    it = litert.Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    (inp,) = it.get_input_details()
    it.set_tensor(inp["index"], random_inputs(data, 0)[inp["index"]])
    it.invoke()
    rows = [it.get_tensor(op.outputs[0]) for op in graph.ops if op.code == "SOFTMAX"][:-1]
    assert len(rows) == 4
    for p in rows:
        assert 0.2 < float(p.max(axis=-1).mean()) < 0.9


def test_bert_tiny_runs_on_the_gpu_in_one_partition() -> None:
    """int32 token ids (negative ones through the converter's LESS/ADD/SELECT_V2 fix-up) and segment ids: every op
    on the GPU, one partition, within 1e-4 of LiteRT; each LayerNorm one dispatch, attention without copies."""
    data = zoo.get("bert_tiny")
    it = assert_matches_litert(data, feeds_for("bert_tiny", data), tol=1e-4)
    assert [p.device for p in it.compiled.plan.partitions] == ["gpu"]
    labels = [d.spec.label for p in it.compiled.gpu_programs for d in p.dispatches]
    if not it.compiled.options.optimize:  # GPUENGINE_OPTIMIZE=0: every op as written
        return
    assert len(labels) <= 26, labels
    assert sum(label.startswith("LAYER_NORM") for label in labels) == 5, labels
    assert sum(label.startswith("ATTENTION") and "views q+k+v+out" in label for label in labels) == 2, labels
    assert sum(label.startswith("GATHER") for label in labels) == 2, labels  # positions are folded


def test_bert_tiny_token_ids() -> None:
    """random_inputs draws ids in [0, 4) and segment ids below the 2 rows of their table (the bound comes from the
    GATHER they feed); the tests' ids cover the vocabulary, and ids outside [-VOCAB, VOCAB) raise LiteRT's error
    from invoke, checked on the host."""
    from gpuengine import Interpreter

    data = zoo.get("bert_tiny")
    ids_t, types_t = read_model(data).subgraphs[0].inputs
    drawn = random_inputs(data, 0)
    assert drawn[ids_t].min() >= 0 and drawn[ids_t].max() == 3
    assert set(np.unique(drawn[types_t])) == {0, 1}
    assert_matches_litert(data, drawn, tol=1e-4)
    ids, _ = bert.token_ids(0)
    assert ids.min() < 0 and ids.max() > bert.VOCAB // 2 and ids.min() >= -bert.VOCAB
    feeds = feeds_for("bert_tiny", data)
    for bad, message in [(bert.VOCAB, "gather index out of bounds"),
                         (-bert.VOCAB - 1, "indices_has_only_positive_elements")]:
        wrong = {**feeds, ids_t: feeds[ids_t].copy()}
        wrong[ids_t][0, 5] = bad
        for cls in (Interpreter, litert.Interpreter):
            it = cls(model_content=data)
            it.allocate_tensors()
            for t, v in wrong.items():
                it.set_tensor(t, v)
            with pytest.raises(RuntimeError, match=message):
                it.invoke()


def test_bert_tiny_activations_are_sane() -> None:
    """Attention rows peaked but not one-hot (uniform over 32 tokens: 1/32), the pooler's TANH not saturated."""
    data = zoo.get("bert_tiny")
    graph = read_model(data).subgraphs[0]
    it = litert.Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    for t, v in feeds_for("bert_tiny", data).items():
        it.set_tensor(t, v)
    it.invoke()
    rows = [it.get_tensor(op.outputs[0]) for op in graph.ops if op.code == "SOFTMAX"]
    assert len(rows) == 2
    for p in rows:
        assert 0.15 < float(p.max(axis=-1).mean()) < 0.9
    pooled = it.get_tensor(graph.outputs[1])
    assert float(np.mean(np.abs(pooled) > 0.99)) < 0.05 and np.std(pooled) > 0.1
