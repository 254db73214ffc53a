"""Whole models with quantized or MediaPipe-custom ops: run once, not in the op tests' three passes (f32, passes
off, fp16), since each takes a minute on lavapipe."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_matches_litert, relative_error, run_gpuengine, run_litert, tolerance

from gpuengine.model.builder import write_model
from gpuengine.model.reader import read_model
from gpuengine.oracle import random_inputs
from gpuengine.reference import run_reference


def test_zoo_mobilenet_v2_int8_matches_litert() -> None:
    """The zoo's int8 MobileNet v2, all on the GPU: its softmax and (as an extra output) its logits within the
    int8 goal of LiteRT's default kernels (XNNPACK), same argmax; and equal to LiteRT's builtin integer kernels,
    whose rounding every int8 op reproduces (CONV_2D, DEPTHWISE_CONV_2D with RELU6, ADD, FULLY_CONNECTED,
    SOFTMAX; before, the logits were 2 steps from them). (Its random classifier picks one class for every input,
    so argmax agreement is checked for real on the classifier below.)"""
    from gpuengine import zoo

    model = read_model(zoo.get("mobilenet_v2_int8"))
    graph = model.main
    logits = next(op.outputs[0] for op in graph.ops if op.code == "RESHAPE")
    graph.outputs = [*graph.outputs, logits]
    data = write_model(model)
    for seed in range(2):
        feeds = random_inputs(data, seed)
        assert_matches_litert(data, feeds)
        ref = run_litert(data, feeds)[logits]
        outputs = run_gpuengine(data, feeds)[0]
        got = outputs[logits]
        assert np.argmax(got) == np.argmax(ref) and len(np.unique(ref)) > 50
        for t, exact in run_litert(data, feeds, builtin=True).items():
            np.testing.assert_array_equal(outputs[t], exact)




@pytest.mark.models
def test_face_landmark_with_attention_runs_on_the_gpu():
    """The MediaPipe model that uses the three ops (mediapipe==0.10.14's face_landmark_with_attention: 3 crops of
    a feature map around lips and eyes, landmarks mapped back): one GPU partition, outputs equal to the float64
    reference executor (LiteRT cannot run the model)."""
    from gpuengine.tools import fetch

    try:
        model = fetch.model_path("face_landmark_with_attention").read_bytes()
    except fetch.ModelsUnavailable as e:
        pytest.skip(f"reference models unavailable (offline?): {e}")
    codes = {op.code for op in read_model(model).main.ops}
    assert {"Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"} <= codes
    feeds = random_inputs(model, seed=1, low=0.0, high=1.0)
    got, it = run_gpuengine(model, feeds)
    plan = it.compiled.plan
    assert plan.unsupported == {} and [p.device for p in plan.partitions] == ["gpu"]
    exact = run_reference(model, feeds)
    for t, ref in exact.items():
        assert relative_error(got[t], ref) <= tolerance(it, 1e-5), t
