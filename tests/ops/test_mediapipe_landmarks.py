"""MediaPipe Landmarks2TransformMatrix / TransformTensorBilinear / TransformLandmarks against numpy references.

LiteRT's wheel has none of these ops ("Encountered unresolved custom op"), so the references below re-state
MediaPipe's CPU kernels (mediapipe/util/tflite/operations/landmarks_to_transform_matrix.cc,
transform_tensor_bilinear.cc, transform_landmarks.cc) loop for loop in float32, with their option parsing
(tensorflow/lite/delegates/gpu/common/mediapipe/). The float64 executor (gpuengine/reference.py) is checked
against them too. Landmarks and matrices are drawn on grids f16 holds exactly, so the fp16 run
(GPUENGINE_PRECISION=fp16) differs only by rounding its outputs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flatbuffers import flexbuffers
from helpers import relative_error, run_gpuengine, tolerance

from gpuengine import Interpreter, ModelError, UnsupportedOpError
from gpuengine.lowering.kernels import registry
from gpuengine.model.builder import ModelBuilder
from gpuengine.model.reader import read_model
from gpuengine.reference import run_reference

F = np.float32


def flex(**items: object) -> bytes:
    """A flexbuffer map as MediaPipe's converters write custom options (integer lists as typed vectors)."""
    b = flexbuffers.Builder()
    with b.Map():
        for key, value in items.items():
            if isinstance(value, list):
                b.TypedVectorFromElements(key, value)
            elif isinstance(value, float):
                b.Float(key, value)
            elif isinstance(value, str):
                b.String(key, value)
            else:
                b.Int(key, value)
    return bytes(b.Finish())


# -- references, transcribed from MediaPipe's CPU kernels ------------------------------------------------------------
def mat_mul(a: list[float], b: list[float], n: int) -> list[float]:
    """Mat3 / Mat4 operator*: float32 sums in k order."""
    out = []
    for r in range(n):
        for c in range(n):
            total = F(0)
            for k in range(n):
                total = F(total + F(a[r * n + k]) * F(b[k * n + c]))
            out.append(total)
    return out


def ref_landmarks_to_matrix(landmarks: np.ndarray, subset_idxs: list[int], left: int, right: int, target: float,
                            out_h: int, out_w: int, scale_x: float, scale_y: float) -> np.ndarray:
    """landmarks_to_transform_matrix.cc, v2::LandmarksToTransformMatrixV2."""
    data = landmarks.astype(F).reshape(-1)
    pairs = [(subset_idxs[2 * i], subset_idxs[2 * i + 1]) for i in range(len(subset_idxs) // 2)]
    if len(subset_idxs) % 2:
        pairs.append((subset_idxs[-1], subset_idxs[-1]))
    # EstimateRotationRadians
    rotation = F(F(target) - F(math.atan2(data[right * 3 + 1] - data[left * 3 + 1],
                                          data[right * 3] - data[left * 3])))
    # EstimateCenterAndSize
    r = rotation
    cos_r, sin_r = F(math.cos(r)), F(math.sin(r))
    rot = [cos_r, -sin_r, F(0), sin_r, cos_r, F(0), F(0), F(0), F(1)]
    rot_inv = [F(math.cos(-r)), -F(math.sin(-r)), F(0), F(math.sin(-r)), F(math.cos(-r)), F(0), F(0), F(0), F(1)]

    def apply(m: list[float], v: list[float]) -> list[float]:
        out = []
        for row in range(3):
            total = F(0)
            for k in range(3):
                total = F(total + F(m[row * 3 + k]) * F(v[k]))
            out.append(total)
        return out
    points = [apply(rot, [data[i * 3], data[i * 3 + 1], F(1)]) for pair in pairs for i in pair]
    hi, lo = list(points[0]), list(points[0])
    for p in points[1:]:
        hi = [max(hi[0], p[0]), max(hi[1], p[1]), hi[2]]
        lo = [min(lo[0], p[0]), min(lo[1], p[1]), lo[2]]
    width, height = F(hi[0] - lo[0]), F(hi[1] - lo[1])
    centre = apply(rot_inv, [F(F(lo[0] + hi[0]) / F(2)), F(F(lo[1] + hi[1]) / F(2)), lo[2]])
    # LandmarksToTransformMatrixV2
    t = [F(1) if i % 5 == 0 else F(0) for i in range(16)]
    t = mat_mul(t, [1, 0, 0, centre[0], 0, 1, 0, centre[1], 0, 0, 1, 0, 0, 0, 0, 1], 4)
    rr = -rotation
    c, s = F(math.cos(rr)), F(math.sin(rr))
    t = mat_mul(t, [c, -s, 0, 0, s, c, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1], 4)
    sx, sy = F(F(F(scale_x) * width) / F(out_w)), F(F(F(scale_y) * height) / F(out_h))
    t = mat_mul(t, [sx, 0, 0, 0, 0, sy, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1], 4)
    t = mat_mul(t, [1, 0, 0, F(-(out_w / 2.0)), 0, 1, 0, F(-(out_h / 2.0)), 0, 0, 1, 0, 0, 0, 0, 1], 4)
    return np.array(t, F).reshape(1, 4, 4)


def sample_points(matrix: np.ndarray, out_h: int, out_w: int, version: int = 2) -> np.ndarray:
    """The input coordinates each output pixel samples (after v2's pixel-centre correction), [OH, OW, 2]."""
    xt, yt = [F(v) for v in matrix.reshape(-1)[0:4]], [F(v) for v in matrix.reshape(-1)[4:8]]
    if version == 2:
        xt[3] = F(xt[3] + (xt[0] * 0.5 + xt[1] * 0.5 - 0.5))
        yt[3] = F(yt[3] + (yt[0] * 0.5 + yt[1] * 0.5 - 0.5))
    points = np.zeros((out_h, out_w, 2), F)
    for y in range(out_h):
        for x in range(out_w):
            coord = (F(x), F(y), F(0), F(1))
            points[y, x] = (F(sum(F(a * b) for a, b in zip(xt, coord))), F(sum(F(a * b) for a, b in zip(yt, coord))))
    return points


def ref_transform_tensor(x: np.ndarray, matrix: np.ndarray, out_h: int, out_w: int, version: int = 2) -> np.ndarray:
    """transform_tensor_bilinear.cc: v2::TransformTensorBilinearV2 (v1::TransformTensor without the correction)."""
    _, h, w, c = x.shape
    points = sample_points(matrix, out_h, out_w, version)
    out = np.zeros((1, out_h, out_w, c), F)

    def read(yy: int, xx: int) -> np.ndarray:
        return np.zeros(c, F) if yy < 0 or xx < 0 or yy >= h or xx >= w else x[0, yy, xx]
    for y in range(out_h):
        for xx in range(out_w):
            tx, ty = points[y, xx]
            if tx < 0 or tx > w - 1 or ty < 0 or ty > h - 1:
                continue
            fx, fy = int(math.floor(tx)), int(math.floor(ty))
            right, lower = F(tx - fx), F(ty - fy)
            upper = (1.0 - right) * read(fy, fx) + right * read(fy, fx + 1)
            below = (1.0 - right) * read(fy + 1, fx) + right * read(fy + 1, fx + 1)
            out[0, y, xx] = lower * below + (1.0 - lower) * upper
    return out


def ref_transform_landmarks(x: np.ndarray, matrix: np.ndarray, dimensions: int, scale: float = 1.0) -> np.ndarray:
    """transform_landmarks.cc: v2 (rank 3, dimensions = last dim) and v1 (rank 4, options dimensions/scale)."""
    m = matrix.astype(F).reshape(-1)
    xt = (m[0], m[1], m[2], F(m[3] * F(scale)))
    yt = (m[4], m[5], m[6], F(m[7] * F(scale)))
    out = x.astype(F).copy()
    flat, res = x.astype(F).reshape(-1), out.reshape(-1)
    for offset in range(0, flat.size, dimensions):
        lv = (flat[offset], flat[offset + 1], F(0), F(1))
        res[offset] = sum(F(a * b) for a, b in zip(xt, lv))
        res[offset + 1] = sum(F(a * b) for a, b in zip(yt, lv))
    return out


# -- models --------------------------------------------------------------------------------------------------------
def matrix_options(n: int, rng: np.random.Generator, count: int, target: float = 0.0,
                   out_hw: tuple[int, int] = (16, 16), scale: tuple[float, float] = (1.5, 1.5)) -> dict:
    left, right = (int(v) for v in rng.choice(n, 2, replace=False))
    return {"subset_idxs": [int(v) for v in rng.integers(0, n, count)], "left_rotation_idx": left,
            "right_rotation_idx": right, "target_rotation_radians": target, "output_height": out_hw[0],
            "output_width": out_hw[1], "scale_x": scale[0], "scale_y": scale[1]}


def landmarks(rng: np.random.Generator, shape: tuple[int, ...], high: float = 48.0) -> np.ndarray:
    """Coordinates on a 1/32 grid (exact in f16 below 64)."""
    return (np.round(rng.uniform(0, high, shape) * 32) / 32).astype(F)


def run_and_check(model: bytes, feeds: dict[int, np.ndarray], want: dict[int, np.ndarray], tol: float = 1e-5,
                  masks: dict[int, np.ndarray] | None = None) -> Interpreter:
    got, it = run_gpuengine(model, feeds)
    plan = it.compiled.plan
    assert [p.device for p in plan.partitions] == ["gpu"], plan.unsupported
    exact = run_reference(model, feeds)
    for t, ref in want.items():
        mask = (masks or {}).get(t, np.ones(ref.shape, bool))
        err = relative_error(got[t][mask], ref[mask])
        assert err <= tolerance(it, tol), (t, err, got[t], ref)
        assert relative_error(exact[t][mask], ref[mask]) <= 1e-5, (t, exact[t], ref)
    return it


@pytest.mark.parametrize("count,target,out_hw,scale", [
    (80, 0.0, (16, 16), (1.5, 1.5)),  # face_landmark_with_attention's lips crop
    (71, 0.0, (16, 16), (1.5, 1.5)),  # an odd subset: the last index pairs with itself
    (5, 0.7, (12, 20), (1.0, 2.25)),
    (2, -math.pi / 2, (9, 4), (0.5, 1.0)),
])
def test_landmarks_to_transform_matrix(count, target, out_hw, scale):
    rng = np.random.default_rng(count)
    n = 30
    opts = matrix_options(n, rng, count, target, out_hw, scale)
    mb = ModelBuilder()
    x = mb.input("landmarks", (1, n, 3))
    mb.output(mb.op("Landmarks2TransformMatrix", [x], (1, 4, 4), custom_options=flex(**opts)))
    pts = landmarks(rng, (1, n, 3))
    want = ref_landmarks_to_matrix(pts, opts["subset_idxs"], opts["left_rotation_idx"], opts["right_rotation_idx"],
                                   target, *out_hw, *scale)
    run_and_check(mb.build(), {x: pts}, {1: want}, tol=1e-5)


def test_matrix_with_fused_scale_feeds_transform_tensor():
    """face_landmark_with_attention's chain: landmarks * 0.25 -> matrix -> crop of a feature map, and the matrix
    times a constant (fused into the matrix kernel's store) -> TransformLandmarks."""
    rng = np.random.default_rng(3)
    n, c = 24, 6
    opts = matrix_options(n, rng, 12)
    mb = ModelBuilder()
    pts_in = mb.input("landmarks", (1, n, 3))
    features = mb.input("features", (1, 12, 12, c))
    crop_points = mb.input("crop_points", (1, 7, 2))
    scaled = mb.op("MUL", [pts_in, mb.const("quarter", np.array([0.25], F))], (1, n, 3))
    matrix = mb.op("Landmarks2TransformMatrix", [scaled], (1, 4, 4), custom_options=flex(**opts))
    crop = mb.op("TransformTensorBilinear", [features, matrix], (1, 8, 8, c),
                 custom_options=flex(output_height=8, output_width=8))
    gain = np.tile(np.array([[1.0], [1.0], [4.0], [4.0]], F), (1, 4)).reshape(1, 4, 4)
    back = mb.op("MUL", [matrix, mb.const("gain", gain)], (1, 4, 4))
    moved = mb.op("TransformLandmarks", [crop_points, back], (1, 7, 2))
    mb.output(crop, moved)
    pts = landmarks(rng, (1, n, 3))
    feats = rng.uniform(-1, 1, (1, 12, 12, c)).astype(F)
    local = landmarks(rng, (1, 7, 2), high=8.0)
    m = ref_landmarks_to_matrix(pts * F(0.25), opts["subset_idxs"], opts["left_rotation_idx"],
                                opts["right_rotation_idx"], 0.0, 16, 16, 1.5, 1.5)
    points = sample_points(m, 8, 8)
    away = ((np.abs(points[..., 0]) > 1e-2) & (np.abs(points[..., 0] - 11) > 1e-2)
            & (np.abs(points[..., 1]) > 1e-2) & (np.abs(points[..., 1] - 11) > 1e-2))
    want = {crop: ref_transform_tensor(feats, m, 8, 8), moved: ref_transform_landmarks(local, m * gain, 2)}
    it = run_and_check(mb.build(), {pts_in: pts, features: feats, crop_points: local}, want, tol=1e-4,
                       masks={crop: np.broadcast_to(away[None, :, :, None], (1, 8, 8, c))})
    assert len(it.compiled.gpu_programs[0].dispatches) >= 4


def test_matrix_store_hosts_a_fused_mul():
    """An elementwise op reading only the matrix runs in the matrix kernel's store (STORE_FN's epilogue)."""
    rng = np.random.default_rng(5)
    opts = matrix_options(16, rng, 9, target=0.3)
    gain = rng.uniform(0.5, 2, (1, 4, 4)).astype(F)
    mb = ModelBuilder()
    x = mb.input("landmarks", (1, 16, 3))
    matrix = mb.op("Landmarks2TransformMatrix", [x], (1, 4, 4), custom_options=flex(**opts))
    out = mb.op("MUL", [matrix, mb.const("gain", gain)], (1, 4, 4), {"fused_activation_function": "RELU"})
    mb.output(out)
    pts = landmarks(rng, (1, 16, 3))
    want = np.maximum(ref_landmarks_to_matrix(pts, opts["subset_idxs"], opts["left_rotation_idx"],
                                              opts["right_rotation_idx"], 0.3, 16, 16, 1.5, 1.5) * gain, 0)
    it = run_and_check(mb.build(), {x: pts}, {out: want})
    specs = [d.spec for d in it.compiled.gpu_programs[0].dispatches]
    if it.compiled.options.optimize:
        assert [0, 1] in [s.ops for s in specs], [s.ops for s in specs]


def affine(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A rotation, scale and shift of an output grid into (mostly) the input, on a 1/256 grid (exact in f16)."""
    angle, scale = rng.uniform(-0.6, 0.6), rng.uniform(0.5, 1.4)
    m = np.eye(4, dtype=F)
    m[0, :2] = (scale * math.cos(angle), -scale * math.sin(angle))
    m[1, :2] = (scale * math.sin(angle), scale * math.cos(angle))
    m[0, 3], m[1, 3] = rng.uniform(-1, w / 2), rng.uniform(-1, h / 2)
    return (np.round(m * 256) / 256).astype(F).reshape(1, 4, 4)


@pytest.mark.parametrize("code,shape,out_hw", [
    ("TransformTensorBilinear", (1, 12, 10, 3), (7, 9)),
    ("TransformTensorBilinear", (1, 9, 13, 8), (16, 16)),
    ("TransformTensorBilinear", (2, 6, 6, 5), (5, 4)),  # batch 0 of the input is sampled
    ("TransformTensor", (1, 11, 8, 4), (6, 6)),  # version 1: no pixel-centre correction
])
def test_transform_tensor_bilinear(code, shape, out_hw):
    rng = np.random.default_rng(sum(shape))
    oh, ow = out_hw
    opts = flex(output_height=oh, output_width=ow) if code == "TransformTensorBilinear" else flex(
        mode="bilinear", output_size=[oh, ow])
    mb = ModelBuilder()
    x = mb.input("x", shape)
    m = mb.input("matrix", (1, 4, 4))
    mb.output(mb.op(code, [x, m], (1, oh, ow, shape[3]), custom_options=opts))
    version = 2 if code == "TransformTensorBilinear" else 1
    crossed = False
    for _ in range(3):
        xs = rng.uniform(-2, 2, shape).astype(F)
        mat = affine(rng, shape[1], shape[2])
        points = sample_points(mat, oh, ow, version)
        bounds = np.array([shape[2] - 1, shape[1] - 1], F)
        away = np.all((np.abs(points) > 1e-3) & (np.abs(points - bounds) > 1e-3), axis=-1)
        want = ref_transform_tensor(xs, mat, oh, ow, version)
        crossed |= bool((want == 0).all(axis=-1).any() and want.any())
        run_and_check(mb.build(), {x: xs, m: mat}, {2: want}, tol=1e-5,
                      masks={2: np.broadcast_to(away[None, :, :, None], want.shape)})
    assert crossed, "some sampling grid should cross the input's border"


@pytest.mark.parametrize("shape,dimensions,scale", [
    ((1, 80, 2), None, None),  # version 2: rank 3, dimensions from the shape
    ((1, 13, 3), None, None),  # version 2 with z passing through
    ((1, 1, 1, 12), 3, 2.0),  # version 1: landmarks packed in the channels, translation scaled
    ((1, 2, 3, 10), 2, None),
    ((1, 3, 1, 9), None, 0.5),  # version 1 default dimensions 3
])
def test_transform_landmarks(shape, dimensions, scale):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    opts = {k: v for k, v in (("dimensions", dimensions), ("scale", scale)) if v is not None}
    mb = ModelBuilder()
    x = mb.input("landmarks", shape)
    m = mb.input("matrix", (1, 4, 4))
    mb.output(mb.op("TransformLandmarks", [x, m], shape, custom_options=flex(**opts) if opts else None))
    pts = landmarks(rng, shape, high=16.0)
    mat = affine(rng, 16, 16)
    mat[0, 0, 2] = mat[0, 1, 2] = 0.5  # the z column is multiplied by 0: it must not leak in
    d = shape[-1] if len(shape) == 3 else dimensions or 3
    want = ref_transform_landmarks(pts, mat, d, 1.0 if scale is None else scale)
    run_and_check(mb.build(), {x: pts, m: mat}, {2: want}, tol=1e-5)


# -- refusals ------------------------------------------------------------------------------------------------------
def _matrix_model(opts: dict, shape: tuple[int, ...] = (1, 10, 3), out: tuple[int, ...] = (1, 4, 4)) -> bytes:
    mb = ModelBuilder()
    x = mb.input("landmarks", shape)
    mb.output(mb.op("Landmarks2TransformMatrix", [x], out, custom_options=flex(**opts)))
    return mb.build()


@pytest.mark.parametrize("change,needle", [
    ({"subset_idxs": []}, "subset_idxs"), ({"left_rotation_idx": 10}, "outside"),
    ({"subset_idxs": [1, 2, -1]}, "outside"), ({"output_width": 0}, "output_height and output_width"),
    ({"scale_y": 0.0}, "scale_x and scale_y"),
])
def test_malformed_matrix_options_are_model_errors(change, needle):
    opts = {**matrix_options(10, np.random.default_rng(0), 4), **change}
    with pytest.raises(ModelError, match=needle):
        Interpreter(model_content=_matrix_model(opts))


def test_malformed_shapes_are_model_errors():
    opts = matrix_options(10, np.random.default_rng(0), 4)
    with pytest.raises(ModelError, match="rank 2"):
        Interpreter(model_content=_matrix_model(opts, shape=(10, 3)))
    with pytest.raises(ModelError, match=r"\(1, 4, 4\)"):
        Interpreter(model_content=_matrix_model(opts, out=(4, 4)))
    mb = ModelBuilder()
    x, m = mb.input("landmarks", (1, 1, 1, 10)), mb.input("matrix", (1, 4, 4))
    mb.output(mb.op("TransformLandmarks", [x, m], (1, 1, 1, 10), custom_options=flex(dimensions=3)))
    with pytest.raises(ModelError, match="divide the last dimension 10"):
        Interpreter(model_content=mb.build())


def test_version_1_matrix_is_refused_with_the_reason():
    """Landmarks2TransformMatrix version 1 (rank-4 input) is not implemented: the GPU says why, and as nothing
    else runs it, construction fails naming the op."""
    mb = ModelBuilder()
    x = mb.input("landmarks", (1, 1, 1, 30))
    mb.output(mb.op("Landmarks2TransformMatrix", [x], (1, 4, 4), custom_options=flex(
        dimensions=3, landmarks_range=192, subset=[0, 1], left_rotation_idx=0, right_rotation_idx=1,
        bbox_size_multiplier=1.5, input_hw=[48, 48], output_hw=[16, 16])))
    graph = read_model(mb.build()).main
    assert "version 2" in registry.check(graph.ops[0], graph)
    it = Interpreter(model_content=mb.build())
    with pytest.raises(UnsupportedOpError, match="Landmarks2TransformMatrix.*LiteRT") as info:
        it.allocate_tensors()
    assert info.value.__suppress_context__, "LiteRT's own traceback should not be chained"


def test_unknown_custom_op_is_named():
    mb = ModelBuilder()
    x = mb.input("x", (1, 4, 4, 3))
    y = mb.op("RELU", [x], (1, 4, 4, 3))
    mb.output(mb.op("NoSuchMediaPipeOp", [y], (1, 4, 4, 3), custom_options=flex(k=1)))
    it = Interpreter(model_content=mb.build())
    with pytest.raises(UnsupportedOpError, match=r"op 1 \(NoSuchMediaPipeOp\).*no GPU kernel.*LiteRT's CPU "
                                                 "runtime has no kernel"):
        it.allocate_tensors()
