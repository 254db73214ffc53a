"""MediaPipe's landmark custom ops (face_landmark_with_attention's attention crops): Landmarks2TransformMatrix,
TransformTensorBilinear (and its version 1, TransformTensor) and TransformLandmarks.

The definitions implemented are MediaPipe's CPU kernels, mediapipe/util/tflite/operations/
landmarks_to_transform_matrix.cc, transform_tensor_bilinear.cc and transform_landmarks.cc, with the option
parsing of TFLite GPU's tensorflow/lite/delegates/gpu/common/mediapipe/ (flexbuffer maps in custom_options; a
missing key reads as 0, as flexbuffers' AsInt32/AsFloat give it). gpuengine/reference.py holds the same
definitions in float64 numpy.

* Landmarks2TransformMatrix, version 2 (input [B, N, 3], landmark i = (x, y, z) at flat 3i of batch 0):
  options subset_idxs, left_rotation_idx, right_rotation_idx, target_rotation_radians, output_height,
  output_width, scale_x, scale_y. r = target_rotation_radians - atan2(y_right - y_left, x_right - x_left);
  the subset's (x, y) rotated by R(r) = [[cos r, -sin r], [sin r, cos r]] give a box (min, max); its centre,
  rotated back by R(-r), is (cx, cy); w, h its size. Output [1, 4, 4]: the matrix
  Shift(cx, cy) * R(-r) * Scale(scale_x * w / output_width, scale_y * h / output_height)
  * Shift(-output_width / 2, -output_height / 2), row-major, which maps crop pixels to input coordinates.
  Version 1 (rank-4 input, options input_hw/landmarks_range/bbox_size_multiplier) is not implemented.
* TransformTensorBilinear (version 2; options output_height, output_width, the output shape is the declared
  one): input [B, H, W, C], matrix [.., 4, 4] (rows 0 and 1 are used), output [1, OH, OW, C] from batch 0.
  The matrix is corrected for pixel centres, x_row[3] += 0.5 * x_row[0] + 0.5 * x_row[1] - 0.5 (same for y);
  output pixel (x, y) samples at (dot(x_row, (x, y, 0, 1)), dot(y_row, ..)); a sample point outside
  [0, W-1] x [0, H-1] gives 0, inside it is bilinear over the four neighbours, those outside reading as 0.
  TransformTensor (version 1, options mode "bilinear" and output_size) is the same without the correction.
* TransformLandmarks, version 2 (no options): landmarks [1, N, D] with D = 2 or 3 = the output's last
  dimension; each landmark (x, y[, z]) becomes (dot(x_row, (x, y, 0, 1)), dot(y_row, (x, y, 0, 1))[, z]).
  Version 1 (rank 4 [1, H, W, C], options dimensions (2 or 3, default 3) and scale (default 1, multiplies the
  matrix's translation, x_row[3] and y_row[3])): every pixel holds C / dimensions landmarks, transformed alike.

MediaPipe computes batch 0 only (other batches of the output stay unwritten), so the GPU requires a batch of 1
where the output has one. Only `Code` and numbers go into the shaders: options become numeric literals and a
u32 table of subset indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...model.ir import Graph, Op
from ...model.mediapipe_options import (
    BILINEAR,
    BILINEAR_V1,
    LANDMARKS,
    MATRIX,
    bilinear_v1_options,
    landmarks_options,
    matrix_options,
)
from ..layout import slices
from .base import Binding, Code, KernelSpec, Lowering
from .common import bhwc, float_tensors


def _is_matrix(shape: tuple[int, ...]) -> bool:
    """A 4x4 matrix stored so that row r is PHWC4 vec4 r: [4, 4], [1, 4, 4] or [1, 1, 4, 4]."""
    return len(shape) >= 2 and tuple(shape[-2:]) == (4, 4) and all(d == 1 for d in shape[:-2])


class MediaPipeLandmarksKernel:
    ops = (MATRIX, BILINEAR, BILINEAR_V1, LANDMARKS)

    def supports(self, op: Op, graph: Graph) -> str | None:
        arity = (1, 1) if op.code == MATRIX else (2, 1)
        if (len(op.inputs), len(op.outputs)) != arity or min(op.inputs) < 0:
            return f"expects {arity[0]} input(s) and {arity[1]} output"
        reason = float_tensors(op, graph)
        if reason:
            return reason
        shapes = [tuple(graph.tensors[t].shape) for t in op.inputs]
        out = tuple(graph.tensors[op.outputs[0]].shape)
        if op.code == MATRIX:
            if len(shapes[0]) != 3:
                return f"input has rank {len(shapes[0])}: only version 2 (landmarks [B, N, 3]) is implemented"
            if shapes[0][2] != 3:
                return f"landmarks have {shapes[0][2]} values each; the op reads (x, y, z) triples"
            if out != (1, 4, 4):
                return f"output shape {out}, expected (1, 4, 4)"
            opts = matrix_options(op, shapes[0][1])
            return opts if isinstance(opts, str) else None
        if not _is_matrix(shapes[1]):
            return f"matrix shape {shapes[1]}, expected [4, 4] with leading 1s"
        if op.code in (BILINEAR, BILINEAR_V1):
            if len(shapes[0]) != 4 or len(out) != 4:
                return "input and output must be rank 4 (NHWC)"
            if out[0] != 1 or out[3] != shapes[0][3]:
                return f"output {out} must have batch 1 and the input's {shapes[0][3]} channels"
            return bilinear_v1_options(op) if op.code == BILINEAR_V1 else None
        opts = landmarks_options(op, graph)
        if isinstance(opts, str):
            return opts
        if len(shapes[0]) not in (3, 4) or out != shapes[0]:
            return f"landmarks {shapes[0]} -> {out}: expected rank 3 or 4 and the same shape out"
        if shapes[0][0] != 1:
            return f"batch {shapes[0][0]}: MediaPipe transforms batch 0 only"
        d = opts["dimensions"]
        if d not in (2, 3) or shapes[0][-1] % d:
            return f"dimensions {d} must be 2 or 3 and divide the last dimension {shapes[0][-1]}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        if op.code == MATRIX:
            return [self._matrix(op, graph)]
        if op.code == LANDMARKS:
            return [self._landmarks(op, graph)]
        return [self._bilinear(op, graph)]

    @staticmethod
    def _matrix(op: Op, graph: Graph) -> KernelSpec:
        opts = matrix_options(op, graph.tensors[op.inputs[0]].shape[1])
        assert isinstance(opts, dict), opts
        subset = np.asarray(opts["subset"], np.uint32)
        params: dict[str, Any] = {
            "LEFT": opts["left"], "RIGHT": opts["right"], "TARGET": opts["target"], "COUNT": int(subset.size),
            "SCALE_X": opts["scale_x"], "SCALE_Y": opts["scale_y"], "OUT_W": float(opts["out_w"]),
            "OUT_H": float(opts["out_h"]), "SHIFT_X": -(opts["out_w"] / 2.0), "SHIFT_Y": -(opts["out_h"] / 2.0),
            "SO": 1, "OH": 1, "OW": 4}
        bindings = [Binding("src", tensor=op.inputs[0]), Binding("subset", data=subset, element="u32"),
                    Binding("dst", tensor=op.outputs[0], writable=True)]
        return KernelSpec("landmarks_to_matrix", params, bindings, grid=(1, 1, 1), workgroup=(1, 1, 1),
                          out_channels=4, label=f"{op.code} subset of {subset.size}", macs=2 * int(subset.size))

    @staticmethod
    def _bilinear(op: Op, graph: Graph) -> KernelSpec:
        _, h, w, c = bhwc(graph, op.inputs[0])
        _, oh, ow, _ = bhwc(graph, op.outputs[0])
        # Version 2 samples pixel centres: T -> S(-0.5) * T * A(0.5) (MediaPipe's align-corners correction).
        correct = Code("xt.w += xt.x * 0.5 + xt.y * 0.5 - 0.5;\n  yt.w += yt.x * 0.5 + yt.y * 0.5 - 0.5;"
                       if op.code == BILINEAR else "")
        params = {"S": slices(c), "H": oh, "W": ow, "IH": h, "IW": w, "CORRECT": correct}
        bindings = [Binding("src", tensor=op.inputs[0]), Binding("mat", tensor=op.inputs[1]),
                    Binding("dst", tensor=op.outputs[0], writable=True)]
        return KernelSpec("transform_tensor_bilinear", params, bindings, grid=(ow, oh, slices(c)), out_channels=c,
                          label=f"{op.code} {h}x{w} -> {oh}x{ow}")

    @staticmethod
    def _landmarks(op: Op, graph: Graph) -> KernelSpec:
        opts = landmarks_options(op, graph)
        assert isinstance(opts, dict), opts
        _, h, w, c = bhwc(graph, op.inputs[0])
        params = {"S": slices(c), "H": h, "W": w, "C": c, "D": opts["dimensions"], "SCALE": opts["scale"]}
        bindings = [Binding("src", tensor=op.inputs[0]), Binding("mat", tensor=op.inputs[1]),
                    Binding("dst", tensor=op.outputs[0], writable=True)]
        return KernelSpec("transform_landmarks", params, bindings, grid=(w, h, slices(c)), out_channels=c,
                          label=f"{op.code} dimensions={opts['dimensions']}")


KERNEL = MediaPipeLandmarksKernel()
