"""MediaPipe's landmark custom ops: their codes and their options (flexbuffer maps), decoded once for the kernel
(lowering/kernels/mediapipe_landmarks.py, which describes the ops) and the float64 reference."""

from __future__ import annotations

import math
from typing import Any

from flatbuffers import flexbuffers

from .ir import Graph, Op

MATRIX, BILINEAR, BILINEAR_V1, LANDMARKS = ("Landmarks2TransformMatrix", "TransformTensorBilinear",
                                            "TransformTensor", "TransformLandmarks")


def flex_options(op: Op) -> dict[str, Any] | str:
    """The op's flexbuffer map of options ({} when it has none), or why it cannot be read."""
    data = op.custom_options or b""
    if not data:
        return {}
    try:
        value = flexbuffers.Loads(data)
    except Exception as e:  # noqa: BLE001 - any malformed flexbuffer is a reason, never a crash
        return f"custom options are not a readable flexbuffer ({type(e).__name__}: {e})"
    if not isinstance(value, dict):
        return f"custom options are a flexbuffer {type(value).__name__}, expected a map"
    return value


def _int(options: dict[str, Any], key: str, default: int = 0) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"option {key} is {value!r}, expected a number")
    return int(value)


def _float(options: dict[str, Any], key: str, default: float = 0.0) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"option {key} is {value!r}, expected a finite number")
    return float(value)


def matrix_options(op: Op, landmarks: int) -> dict[str, Any] | str:
    """Landmarks2TransformMatrix version 2's options, checked as MediaPipe's Eval checks them (and indices
    within the landmark count, which MediaPipe reads without checking); or why they are unusable."""
    raw = flex_options(op)
    if isinstance(raw, str):
        return raw
    if "subset_idxs" not in raw:
        return "custom options have no subset_idxs (version 1 of the op, not implemented, or malformed)"
    try:
        subset = [int(v) for v in raw["subset_idxs"]]
        opts = {"subset": subset, "left": _int(raw, "left_rotation_idx"), "right": _int(raw, "right_rotation_idx"),
                "target": _float(raw, "target_rotation_radians"), "out_h": _int(raw, "output_height"),
                "out_w": _int(raw, "output_width"), "scale_x": _float(raw, "scale_x"),
                "scale_y": _float(raw, "scale_y")}
    except (TypeError, ValueError) as e:
        return f"custom options: {e}"
    if not subset:
        return "subset_idxs is empty"
    indices = [opts["left"], opts["right"], *subset]
    if min(indices) < 0 or max(indices) >= landmarks:
        return f"landmark indices {min(indices)}..{max(indices)} outside the input's {landmarks} landmarks"
    if opts["out_h"] <= 0 or opts["out_w"] <= 0:
        return f"output_height {opts['out_h']} and output_width {opts['out_w']} must be >= 1"
    if opts["scale_x"] <= 0 or opts["scale_y"] <= 0:
        return f"scale_x {opts['scale_x']} and scale_y {opts['scale_y']} must be > 0"
    return opts


def landmarks_options(op: Op, graph: Graph) -> dict[str, Any] | str:
    """TransformLandmarks: {dimensions, scale}; version 2 (rank 3) takes them from the shape (scale 1)."""
    shape = graph.tensors[op.inputs[0]].shape
    if len(shape) == 3:
        return {"dimensions": int(shape[2]), "scale": 1.0}
    raw = flex_options(op)
    if isinstance(raw, str):
        return raw
    try:
        opts = {"dimensions": _int(raw, "dimensions", 3), "scale": _float(raw, "scale", 1.0)}
    except ValueError as e:
        return f"custom options: {e}"
    if opts["scale"] == 0:
        return "scale is 0 (MediaPipe refuses it)"
    return opts


def bilinear_v1_options(op: Op) -> str | None:
    """TransformTensor (version 1): mode must be "bilinear" when given."""
    raw = flex_options(op)
    if isinstance(raw, str):
        return raw
    mode = raw.get("mode", "bilinear")
    return None if mode == "bilinear" else f"mode {mode!r}: only bilinear interpolation exists"
