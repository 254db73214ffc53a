"""Op-level validation (gpuengine/model/validate.py): every valid model loads, each malformation is a ModelError
at construction naming the op and what is wrong, huge shapes are refused before allocation, and NaN/Inf inputs
run like LiteRT."""

from __future__ import annotations

import copy
import struct

import numpy as np
import pytest
from helpers import SHARED_MODELS, cached_reference_model

from gpuengine import Interpreter, ModelError, zoo
from gpuengine.model import validate
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.ir import Quantization
from gpuengine.model.reader import read_model

TOY_LLM = SHARED_MODELS / "toy_decoder_kv.tflite"
REFERENCE_MODELS = ["face_detection_short_range", "face_landmark", "selfie_segmentation", "hand_landmark_lite",
                    "palm_detection_lite", "pose_detection"]


# -- valid models pass ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_models_pass(name: str) -> None:
    validate.validate_model(read_model(zoo.get(name)))


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_reference_models_pass(name: str) -> None:
    validate.validate_model(read_model(cached_reference_model(name)))


def test_toy_llm_passes_and_its_subgraph_references_are_checked() -> None:
    if not TOY_LLM.exists():
        pytest.skip(f"{TOY_LLM} not present")
    model = read_model(TOY_LLM.read_bytes())
    validate.validate_model(model)  # STABLEHLO_COMPOSITE, GATHER_ND, DYNAMIC_UPDATE_SLICE, six subgraphs
    composite = next(op for op in model.subgraphs[0].ops if op.code == "STABLEHLO_COMPOSITE")
    composite.options.fields["decomposition_subgraph_index"] = 0
    with pytest.raises(ModelError, match=r"op \d+ \(STABLEHLO_COMPOSITE\): decomposition_subgraph_index 0 refers "
                                         "to the op's own subgraph"):
        validate.validate_model(model)
    composite.options.fields["decomposition_subgraph_index"] = 9
    with pytest.raises(ModelError, match="decomposition_subgraph_index 9 is out of range"):
        validate.validate_model(model)


# -- malformed models: ModelError at construction, naming op, code and problem --------------------------------------
def _conv(options: dict | None, weights: tuple = (4, 3, 3, 3), out: tuple = (1, 8, 8, 4), bias: int = 4) -> bytes:
    mb = ModelBuilder()
    x = mb.input("x", (1, 8, 8, 3))
    w = mb.const("w", np.ones(weights, np.float32))
    b = mb.const("b", np.zeros(bias, np.float32))
    mb.output(mb.op("CONV_2D", [x, w, b], out, options))
    return mb.build()


def _after_relu(code: str, extra: list, out: tuple, options: dict | None = None, x_shape: tuple = (1, 4, 4, 2),
                dtype: object = np.float32) -> bytes:
    """RELU then `code` on its output: op 1 is the one under test."""
    mb = ModelBuilder()
    x = mb.input("x", x_shape)
    r = mb.op("RELU", [x], x_shape)
    ins = [r] + [mb.const(f"c{k}", v) if isinstance(v, np.ndarray) else v for k, v in enumerate(extra)]
    mb.output(mb.op(code, ins, out, options, dtype=dtype))
    return mb.build()


def _int32_softmax() -> bytes:
    """Consistent types, but ones LiteRT's SOFTMAX fails on at invoke."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4), np.int32)
    mb.output(mb.op("SOFTMAX", [x], (1, 4), {"beta": 1.0}, dtype=np.int32))
    return mb.build()


def _composite(empty_options: bool = False) -> bytes:
    """A STABLEHLO_COMPOSITE written without the options that name its decomposition subgraph (the builder would
    write an empty StableHLOCompositeOptions table: `empty_options` keeps it, whose index 0 is the op's own)."""
    mb = ModelBuilder()
    x = mb.input("x", (1, 4))
    mb.output(mb.op("STABLEHLO_COMPOSITE", [x], (1, 4)))
    if not empty_options:
        mb.ops[0].options = None
    return mb.build()


def _graph_edit(edit) -> bytes:
    """tiny, read into the IR, changed by `edit(graph)`, written back."""
    from gpuengine.model.builder import write_model

    model = read_model(zoo.get("tiny"))
    edit(model.main)
    return write_model(model)


MALFORMED = {
    "stride 0": (lambda: _conv({"stride_h": 0, "stride_w": 1}), r"op 0 \(CONV_2D\): stride_h is 0, must be >= 1"),
    "absent strides": (lambda: _conv(None), r"op 0 \(CONV_2D\): stride_h is 0, must be >= 1"),
    "no options table": (lambda: _graph_edit(lambda g: setattr(g.ops[0], "options", None)),
                         r"op 0 \(CONV_2D\): stride_h is 0, must be >= 1 \(the op has no Conv2DOptions"),
    "padding enum": (lambda: _conv({"stride_h": 1, "stride_w": 1, "padding": 7}), r"padding is 7, must be one of"),
    "activation enum": (lambda: _conv({"stride_h": 1, "stride_w": 1, "fused_activation_function": 9}),
                        r"fused_activation_function is 9"),
    "dilation 0": (lambda: _conv({"stride_h": 1, "stride_w": 1, "dilation_h_factor": -1}),
                   r"dilation_h_factor is -1, must be >= 1"),
    "output shape": (lambda: _conv({"stride_h": 2, "stride_w": 2}), r"op 0 \(CONV_2D\): output 0 \(tensor 3 "
                                                                     r"'conv_2d_0_0'\) has shape \(1, 8, 8, 4\), "
                                                                     r"expected \(1, 4, 4, 4\)"),
    "bias size": (lambda: _conv({"stride_h": 1, "stride_w": 1}, bias=5), r"bias \('b'\) has 5 values for 4"),
    "filter channels": (lambda: _conv({"stride_h": 1, "stride_w": 1}, weights=(4, 3, 3, 2)),
                        r"input has 3 channels, the filter 2"),
    "filter rank": (lambda: _conv({"stride_h": 1, "stride_w": 1}, weights=(4, 9, 3)), r"input 1 \('w'\) has rank 3"),
    "negative pad": (lambda: _after_relu("PAD", [np.array([[0, 0], [-1, 1], [0, 0], [0, 0]], np.int32)],
                                         (1, 4, 4, 2)), r"op 1 \(PAD\): paddings .* contain a negative value"),
    "pad shape": (lambda: _after_relu("PAD", [np.zeros((3, 2), np.int32)], (1, 4, 4, 2)),
                  r"paddings have shape \(3, 2\), must be \[4, 2\]"),
    "mean axis": (lambda: _after_relu("MEAN", [np.array([5], np.int32)], (1, 4, 4, 2)),
                  r"op 1 \(MEAN\): axis 5 is out of range for rank 4"),
    "concat axis": (lambda: _after_relu("CONCATENATION", [0], (1, 4, 4, 4), {"axis": 7}),
                    r"op 1 \(CONCATENATION\): axis 7 is out of range"),
    "perm": (lambda: _after_relu("TRANSPOSE", [np.array([0, 1, 1, 2], np.int32)], (1, 4, 4, 2)),
             r"perm \[0, 1, 1, 2\] is not a permutation"),
    "reshape count": (lambda: _after_relu("RESHAPE", [np.array([1, 33], np.int32)], (1, 33)),
                      r"op 1 \(RESHAPE\): input \(1, 4, 4, 2\) has 32 values, output \(1, 33\) 33"),
    "resize size": (lambda: _after_relu("RESIZE_BILINEAR", [np.array([0, 4], np.int32)], (1, 0, 4, 2)),
                    r"size \[0, 4\] must be positive"),
    "gather index": (lambda: _after_relu("GATHER", [np.array([4], np.int32)], (1, 4, 1, 2), {"axis": 2}),
                     r"constant indices \[4\] are out of range for dimension 2"),
    "strided slice stride": (lambda: _after_relu("STRIDED_SLICE", [np.zeros(4, np.int32), np.ones(4, np.int32),
                                                                   np.array([1, 0, 1, 1], np.int32)], (1, 1, 1, 1)),
                             r"strides \[1, 0, 1, 1\] contain 0"),
    "block size": (lambda: _after_relu("DEPTH_TO_SPACE", [], (1, 4, 4, 2), {"block_size": 0}),
                   r"block_size is 0, must be >= 1"),
    "too many inputs": (lambda: _after_relu("ADD", [0, 0], (1, 4, 4, 2)), r"op 1 \(ADD\): has 3 inputs, expected 2"),
    "omitted input": (lambda: _after_relu("ADD", [-1], (1, 4, 4, 2)), r"op 1 \(ADD\): input 1 is omitted"),
    "not broadcastable": (lambda: _after_relu("ADD", [np.ones(3, np.float32)], (1, 4, 4, 2)),
                          r"input shapes \(1, 4, 4, 2\), \(3,\) do not broadcast"),
    "type mismatch": (lambda: _after_relu("ADD", [np.ones(2, np.int32)], (1, 4, 4, 2)),
                      r"input 1 \('c0'\) is int32, input 0 \('relu_0_0'\) is float32"),
    "output type": (lambda: _after_relu("SOFTMAX", [], (1, 4, 4, 2), dtype=np.int32),
                    r"op 1 \(SOFTMAX\): output 0 \('softmax_1_0'\) is int32, input 0 \('relu_0_0'\) is float32"),
    "type LiteRT does not run": (lambda: _int32_softmax(), r"op 0 \(SOFTMAX\): input 0 \('x'\) is int32; LiteRT runs "
                                                           r"SOFTMAX on float16, float32, int16, int8, uint8"),
    "reads a later tensor": (lambda: _graph_edit(lambda g: g.ops[0].inputs.__setitem__(0, g.ops[2].outputs[0])),
                             r"op 0 \(CONV_2D\): input 0 \(tensor \d+ '.*'\) is written by op 2, which runs later"),
    "writes a constant": (lambda: _graph_edit(lambda g: g.ops[1].outputs.__setitem__(0, g.ops[0].inputs[1])),
                          r"op 1 \(DEPTHWISE_CONV_2D\): writes tensor \d+ \('.*'\), which is a constant"),
    "writes twice": (lambda: _graph_edit(lambda g: g.ops[1].outputs.__setitem__(0, g.ops[0].outputs[0])),
                     r"op 1 \(DEPTHWISE_CONV_2D\): output tensor \d+ \('.*'\) is also written by op 0"),
    "composite without options": (lambda: _composite(), r"op 0 \(STABLEHLO_COMPOSITE\): has no "
                                                        r"StableHLOCompositeOptions"),
    "composite calling itself": (lambda: _composite(empty_options=True),
                                 r"op 0 \(STABLEHLO_COMPOSITE\): decomposition_subgraph_index 0 refers to the op's "
                                 r"own subgraph"),
    "never written": (lambda: _graph_edit(lambda g: g.inputs.clear()),
                      r"op 0 \(CONV_2D\): input 0 \(tensor 0 'input'\) is never written"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_model_is_a_model_error_at_construction(case: str) -> None:
    build, message = MALFORMED[case]
    with pytest.raises(ModelError, match=message):
        Interpreter(model_content=build())  # no allocate_tensors: nothing may run before the check


def test_subgraph_errors_name_the_subgraph() -> None:
    model = read_model(zoo.get("tiny"))
    second = copy.deepcopy(model.main)
    second.ops[0].options.fields["stride_h"] = 0
    model.subgraphs.append(second)
    with pytest.raises(ModelError, match=r"subgraph 1 op 0 \(CONV_2D\): stride_h is 0"):
        validate.validate_model(model)


def test_mediapipe_custom_ops_check_their_struct_options() -> None:
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 2))
    options = struct.pack("<6i", 1, 0, 2, 2, 2, 0)  # stride_w 0
    y, idx = mb.op("MaxPoolingWithArgmax2D", [x], [(1, 2, 2, 2), (1, 2, 2, 2)], custom_options=options)
    mb.output(y, idx)
    with pytest.raises(ModelError, match=r"op 0 \(MaxPoolingWithArgmax2D\): custom options: .* strides \(2, 0\)"):
        Interpreter(model_content=mb.build())


def test_quantized_tensors_need_quantization_parameters() -> None:
    """LiteRT aborts the process on an int8 ADD without scales (probed with 2.3.0)."""
    def build(quantized: bool) -> bytes:
        q = Quantization(scale=np.array([0.1], np.float32), zero_point=np.array([0])) if quantized else None
        mb = ModelBuilder()
        x = mb.tensor("x", (1, 4), np.int8, quantization=q)
        mb.inputs.append(x)
        y = mb.op("ADD", [x, x], (1, 4), dtype=np.int8)
        mb.tensors[y].quantization = q
        mb.output(y)
        return mb.build()

    validate.validate_model(read_model(build(True)))
    with pytest.raises(ModelError, match=r"op 0 \(ADD\): input 0 \('x'\) is int8 without quantization"):
        validate.validate_model(read_model(build(False)))


# -- huge shapes -----------------------------------------------------------------------------------------------------
def test_huge_shapes_are_refused_before_allocation_with_the_bytes_needed(monkeypatch) -> None:
    """The bytes the model's tensors would take, against what the process can allocate (1 GiB here)."""
    monkeypatch.setattr(validate, "available_bytes", lambda: 1 << 30)
    mb = ModelBuilder()
    x = mb.input("x", (1, 8192, 8192, 4))  # 1 GiB of float32 input, and as much again for the output
    mb.output(mb.op("RELU", [x], (1, 8192, 8192, 4)))
    with pytest.raises(ModelError, match=r"2 non-constant tensors would need 2,147,483,648 bytes, more than the "
                                         r"1,073,741,824 this process can allocate; the largest is tensor 0 \('x'\)"):
        Interpreter(model_content=mb.build())


def test_available_bytes_follows_the_address_space_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    assert 0 < validate.available_bytes()
    if soft != resource.RLIM_INFINITY:
        assert validate.available_bytes() <= soft


def test_resize_to_a_huge_shape_is_refused_before_litert_allocates(monkeypatch) -> None:
    monkeypatch.setattr(validate, "available_bytes", lambda: 1 << 30)
    it = Interpreter(model_content=zoo.get("tiny"))
    with pytest.raises(ModelError, match=r"input 0 \('input'\) resized to \(1, 32768, 32768, 3\) float32 would need "
                                         r"12,884,901,888 bytes"):
        it.resize_tensor_input(0, [1, 32768, 32768, 3])


# -- NaN and Inf inputs ------------------------------------------------------------------------------------------------
def test_tensors_beyond_32_bit_indexing_stay_off_the_gpu() -> None:
    from gpuengine.delegate.support import gpu_support

    mb = ModelBuilder()
    x = mb.input("x", (1, 1 << 14, 1 << 14, 2))  # 2 GiB once padded to 4 channels
    mb.output(mb.op("RELU", [x], (1, 1 << 14, 1 << 14, 2)))
    graph = read_model(mb.build()).main
    assert "2 GiB or more" in gpu_support(graph)[0]
