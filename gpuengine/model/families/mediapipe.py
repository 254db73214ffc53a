"""MediaPipe's landmark and transform custom ops: what each op means.

RULES (validation, with shape rules), OWN_SHAPE_RULES, FOLDERS (constant folding) and BUILTIN_OPS / CUSTOM_OPS
(float64 references) for the op codes in CODES; see model/families/__init__.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from flatbuffers import flexbuffers

from ..ir import Graph, Op
from ..mediapipe_options import landmarks_options, matrix_options
from ._common import (
    F64,
    Fn,
    Invalid,
    Node,
    OpView,
    Rule,
    _r,
    finish_rules,
    ranks,
    registrar,
    same_as_input,
)

NAME = "MediaPipe landmarks"
CODES: tuple[str, ...] = (
    "Landmarks2TransformMatrix", "TransformLandmarks", "TransformTensor", "TransformTensorBilinear")


# -- validation and shape rules ---------------------------------------------------------------------------------------
def _flex_map(v: OpView) -> dict[str, Any]:
    """The op's flexbuffer options map ({} when absent); a missing key reads as 0, as in MediaPipe."""
    raw = v.op.custom_options or b""
    if not raw:
        return {}
    try:
        value = flexbuffers.Loads(raw)
    except Exception as e:  # noqa: BLE001 - any undecodable flexbuffer is a malformed op
        raise Invalid(f"custom options are not a readable flexbuffer ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise Invalid(f"custom options are a flexbuffer {type(value).__name__}, expected a map")
    return value


def _flex_number(options: dict[str, Any], key: str, default: float = 0) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise Invalid(f"custom option {key} is {value!r}, expected a finite number")
    return value


def mp_float32(v: OpView) -> None:
    """MediaPipe's landmark ops read and write float32 tensors only."""
    for what, t in [*((f"input {i}", v.tensor(i)) for i in range(v.n_in)), ("output", v.out())]:
        if t.dtype != np.float32:
            raise Invalid(f"{what} ({t.name!r}) is {t.dtype}, must be float32")


def mp_landmarks_to_matrix(v: OpView) -> None:
    """Landmarks2TransformMatrix version 2 (rank-3 input): what MediaPipe's Eval refuses (negative indices, output
    size < 1, scale <= 0) and indices past the landmarks (which it would read out of bounds)."""
    options = _flex_map(v)
    if v.rank(0) != 3:
        return  # version 1: options checked by whoever runs it
    subset = options.get("subset_idxs", [])
    if not isinstance(subset, list) or not subset or not all(isinstance(i, int) for i in subset):
        raise Invalid("custom option subset_idxs must be a non-empty list of landmark indices")
    indices = [int(_flex_number(options, "left_rotation_idx")), int(_flex_number(options, "right_rotation_idx")),
               *subset]
    if min(indices) < 0 or max(indices) >= v.shape(0)[1]:
        raise Invalid(f"custom options: landmark indices {min(indices)}..{max(indices)} outside the input's "
                      f"{v.shape(0)[1]} landmarks")
    if min(_flex_number(options, "output_height"), _flex_number(options, "output_width")) < 1:
        raise Invalid("custom options: output_height and output_width must be >= 1")
    if min(_flex_number(options, "scale_x"), _flex_number(options, "scale_y")) <= 0:
        raise Invalid("custom options: scale_x and scale_y must be > 0")
    _flex_number(options, "target_rotation_radians")


def mp_transform_landmarks(v: OpView) -> None:
    """TransformLandmarks: version 2 (rank 3) transforms 2 or 3 values per landmark; version 1 (rank 4) takes
    dimensions (2 or 3, dividing the channels) and a nonzero scale from its options."""
    options = _flex_map(v)
    dims = v.shape(0)[-1] if v.rank(0) == 3 else int(_flex_number(options, "dimensions", 3))
    if dims not in (2, 3) or v.shape(0)[-1] % dims:
        raise Invalid(f"{dims} values per landmark: must be 2 or 3 and divide the last dimension {v.shape(0)[-1]}")
    if v.rank(0) == 4 and _flex_number(options, "scale", 1.0) == 0:
        raise Invalid("custom option scale is 0")


def mp_transform_tensor(v: OpView) -> None:
    """TransformTensorBilinear / TransformTensor: a readable options map; version 1 interpolates bilinearly only."""
    options = _flex_map(v)
    if v.op.code == "TransformTensor" and options.get("mode", "bilinear") != "bilinear":
        raise Invalid(f"custom option mode {options.get('mode')!r}: only bilinear exists")


RULES: dict[str, Rule] = {
    "Landmarks2TransformMatrix": _r(1, 1, checks=[ranks(in0=(3, 4)), mp_float32, mp_landmarks_to_matrix],
                                    shape=lambda v: [(1, 4, 4)], custom=True),
    "TransformLandmarks": _r(2, 1, checks=[ranks(in0=(3, 4)), mp_float32, mp_transform_landmarks],
                             shape=same_as_input, custom=True),
    **dict.fromkeys(["TransformTensorBilinear", "TransformTensor"],
                    _r(2, 1, checks=[ranks(in0=(4, 4), out0=(4, 4)), mp_float32, mp_transform_tensor], custom=True)),
}

# Ops checked by their input and output counts only, as LiteRT's kernels check them (no GPU kernel claims them,
# no reference model uses them).
COUNTS: dict[str, tuple[tuple[int, int | None], tuple[int, int | None]]] = {}

# Element types LiteRT runs, and those that need quantization parameters (see _common.finish_rules).
TYPES: dict[str, tuple[str, str]] = {}

finish_rules(RULES, COUNTS, TYPES)

# Shape rules that read more than the validation rule's view (the declared output, raw custom options).
OWN_SHAPE_RULES: dict[str, Callable[[OpView, Graph], Any]] = {}


# -- constant folding -------------------------------------------------------------------------------------------------
FOLDERS: dict[str, Callable[[Op, Graph], list[np.ndarray]]] = {}


# -- float64 references -----------------------------------------------------------------------------------------------
BUILTIN_OPS: dict[str, Fn] = {}
CUSTOM_OPS: dict[str, Fn] = {}
builtin, custom = registrar(BUILTIN_OPS), registrar(CUSTOM_OPS)


def _matrix_rows(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = np.asarray(m, F64).reshape(-1)
    return flat[0:4].copy(), flat[4:8].copy()


@custom("Landmarks2TransformMatrix")
def _landmarks_to_matrix(n: Node) -> list[np.ndarray]:
    """landmarks_to_transform_matrix.cc, version 2: Shift(centre) * R(-r) * Scale * Shift(-output size / 2)."""
    landmarks = n.x().reshape(-1)
    opts = matrix_options(n.op, n.x().shape[1])
    if isinstance(opts, str):
        raise ValueError(opts)

    def xy(i: int) -> np.ndarray:
        return landmarks[3 * i:3 * i + 2]
    left, right = xy(opts["left"]), xy(opts["right"])
    r = opts["target"] - math.atan2(right[1] - left[1], right[0] - left[0])
    rot = np.array([[math.cos(r), -math.sin(r)], [math.sin(r), math.cos(r)]])
    points = np.stack([xy(i) for i in opts["subset"]]) @ rot.T
    lo, hi = points.min(axis=0), points.max(axis=0)
    cx, cy = rot.T @ ((lo + hi) / 2)  # R(-r) = R(r)^T
    sx = opts["scale_x"] * (hi[0] - lo[0]) / opts["out_w"]
    sy = opts["scale_y"] * (hi[1] - lo[1]) / opts["out_h"]

    def affine(a: np.ndarray, t: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
        m = np.eye(4)
        m[:2, :2], m[:2, 3] = a, t
        return m
    t = (affine(np.eye(2), (cx, cy)) @ affine(rot.T) @ affine(np.diag([sx, sy]))
         @ affine(np.eye(2), (-opts["out_w"] / 2.0, -opts["out_h"] / 2.0)))
    return [t.reshape(1, 4, 4)]


@custom("TransformTensorBilinear", "TransformTensor")
def _transform_tensor(n: Node) -> list[np.ndarray]:
    """transform_tensor_bilinear.cc: output pixel (x, y) samples batch 0 at rows 0-1 of the matrix times
    (x, y, 0, 1), zero outside [0, W-1] x [0, H-1], bilinear with out-of-range neighbours 0; version 2 first moves
    the matrix to pixel centres."""
    x = n.x(0)[0]
    xt, yt = _matrix_rows(n.x(1))
    if n.op.code == "TransformTensorBilinear":
        xt[3] += xt[0] * 0.5 + xt[1] * 0.5 - 0.5
        yt[3] += yt[0] * 0.5 + yt[1] * 0.5 - 0.5
    _, oh, ow, c = n.out_shape()
    h, w = x.shape[:2]
    oy, ox = np.meshgrid(np.arange(oh, dtype=F64), np.arange(ow, dtype=F64), indexing="ij")
    tx, ty = xt[0] * ox + xt[1] * oy + xt[3], yt[0] * ox + yt[1] * oy + yt[3]
    inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
    fx, fy = np.floor(np.where(inside, tx, 0)), np.floor(np.where(inside, ty, 0))
    padded = np.pad(x[..., :c], ((0, 1), (0, 1), (0, 0)))  # the neighbour past the last row/column reads 0
    x0, y0 = fx.astype(np.int64), fy.astype(np.int64)
    right, lower = (tx - fx)[..., None], (ty - fy)[..., None]
    top = (1 - right) * padded[y0, x0] + right * padded[y0, x0 + 1]
    bottom = (1 - right) * padded[y0 + 1, x0] + right * padded[y0 + 1, x0 + 1]
    return [np.where(inside[..., None], lower * bottom + (1 - lower) * top, 0.0)[None]]


@custom("TransformLandmarks")
def _transform_landmarks(n: Node) -> list[np.ndarray]:
    """transform_landmarks.cc: x, y of each landmark -> rows 0-1 of the matrix times (x, y, 0, 1) (version 1:
    translation times `scale`); z unchanged; batch 0."""
    opts = landmarks_options(n.op, n.graph)
    if isinstance(opts, str):
        raise ValueError(opts)
    x = n.x(0)
    d = opts["dimensions"]
    xt, yt = _matrix_rows(n.x(1))
    xt[3] *= opts["scale"]
    yt[3] *= opts["scale"]
    points = x[0].reshape(-1, d)
    out = points.copy()
    out[:, 0] = xt[0] * points[:, 0] + xt[1] * points[:, 1] + xt[3]
    out[:, 1] = yt[0] * points[:, 0] + yt[1] * points[:, 1] + yt[3]
    return [out.reshape(x.shape)]
