"""The model builder without LiteRT: option kinds and rejections, round trips through the reader (quantization
min/max, metadata, intermediates, a fixed point), sparse tensors refused (tests/models/test_builder.py: built models
run on LiteRT)."""

from __future__ import annotations

import numpy as np
import pytest
import tflite

from gpuengine.model.builder import ModelBuilder, make_options, options_kind, write_model
from gpuengine.model.ir import Quantization, SignatureDef, Sparsity
from gpuengine.model.reader import read_model


def test_options_kinds_and_rejections() -> None:
    assert options_kind("MAX_POOL_2D") == "Pool2DOptions"
    assert options_kind("MEAN") == "ReducerOptions"
    assert options_kind("DEPTHWISE_CONV_2D") == "DepthwiseConv2DOptions"
    assert options_kind("RELU") is None
    with pytest.raises(ValueError, match="no field 'strides'"):
        make_options("CONV_2D", {"strides": 2})
    with pytest.raises(ValueError, match="takes no builtin options"):
        make_options("RELU", {"alpha": 1.0})
    with pytest.raises(KeyError):
        make_options("CONV_2D", {"padding": "HALF"})


def test_quantization_min_max_round_trip() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (4,), np.int8)
    mb.tensors[x].quantization = Quantization(np.array([0.5], np.float32), np.zeros(1, np.int64),
                                              min=np.array([-64.0], np.float32),
                                              max=np.array([63.5], np.float32))
    mb.output(mb.op("RELU", [x], (4,), dtype=np.int8))
    q = read_model(mb.build()).main.tensors[x].quantization
    assert q is not None and q.min is not None and q.max is not None
    np.testing.assert_array_equal(q.min, [-64.0])
    np.testing.assert_array_equal(q.max, [63.5])


def test_metadata_and_description_round_trip() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (2,))
    mb.output(mb.op("RELU", [x], (2,)))
    model = mb.to_model()
    model.metadata = {"min_runtime_version": b"1.14.0\x00\x00", "blob": bytes(range(256)), "empty": b""}
    model.description = "built by a test"
    back = read_model(write_model(model))
    assert back.metadata == model.metadata
    assert back.description == "built by a test"
    raw = tflite.Model.GetRootAsModel(write_model(model), 0)
    names = sorted(raw.Metadata(i).Name().decode() for i in range(raw.MetadataLength()))
    assert names == sorted(model.metadata)


def test_round_trip_is_a_fixed_point() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 2))
    w = mb.const("w", np.ones((1, 3, 3, 2), np.float32))
    dw = mb.op("DEPTHWISE_CONV_2D", [x, w, -1], (1, 4, 4, 2),
               options={"padding": "SAME", "stride_w": 1, "stride_h": 1, "depth_multiplier": 1})
    out = mb.op("TANH", [dw], (1, 4, 4, 2))
    mb.output(out)
    mb.signatures.append(SignatureDef("s", 0, {"in": x}, {"out": out}))
    first = mb.build()
    second = write_model(read_model(first))
    assert second == first


def test_sparse_tensor_is_refused() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (2,))
    mb.output(mb.op("RELU", [x], (2,)))
    model = mb.to_model()
    model.main.tensors[0].sparsity = Sparsity([0], [], [{"format": 0, "dense_size": 2}])
    with pytest.raises(ValueError, match="sparse"):
        write_model(model)


def test_intermediates_round_trip() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (2,))
    scratch = mb.tensor("scratch", (2,))
    mb.output(mb.op("RELU", [x], (2,)))
    model = mb.to_model()
    model.main.ops[0].intermediates = [scratch]
    assert read_model(write_model(model)).main.ops[0].intermediates == [scratch]
