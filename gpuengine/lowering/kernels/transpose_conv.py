"""TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias, as a gather: each output pixel visits only the
taps whose phase matches its position (ky = (oy + pad_top) mod stride, then every stride-th), so no work is
spent on the zeros a scatter formulation would insert.

out[b, oy, ox, o] = bias[o] + sum of in[b, iy, ix, i] * W[o, ky, kx, i]
                    over iy*s - pad_top + ky == oy, ix*s - pad_left + kx == ox, all i

TRANSPOSE_CONV inputs: (output_shape const int32, weights [O, KH, KW, I], input, optional bias). Its padding
is TFLite's ComputePaddingHeightWidth run on the *output* size: max((out_size(oh) - 1)*s + k - oh, 0) // 2.

Convolution2DTransposeBias inputs: (input, weights [O, KH, KW, I], bias [O]); custom_options are MediaPipe's
TfLiteTransposeConvParams as 3 little-endian int32: padding (1 SAME, 2 VALID), stride_width, stride_height.
There pad_total = SAME ? max(0, k - (in - 1) % s - 1) : 0, pad = pad_total // 2,
out = s * (in - 1) + k - pad_total.

Weights use CONV_2D's mat4x4 block layout [out_slice][ky][kx][in_slice]; each invocation computes ST slices.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ...model.ir import Graph, Op
from ...model.ops import SAME, VALID, out_size
from .base import Binding, Code, KernelSpec, Lowering
from .common import activation, activation_supported, bhwc, const_f32, float_tensors, is_const
from .conv2d import bias_vec4, lines, pad_before, weight_blocks

MEDIAPIPE = "Convolution2DTransposeBias"


@dataclass
class Transposed:
    """Where each operand is and the numbers the shader bakes."""

    src: int
    weights: int
    bias: int
    sh: int
    sw: int
    pad_top: int
    pad_left: int


def mediapipe_params(op: Op) -> tuple[int, int, int] | None:
    """(padding, stride_w, stride_h) from the custom options, or None when they are malformed."""
    raw = op.custom_options or b""
    if len(raw) < 12:
        return None
    return struct.unpack_from("<3i", raw)


def _mediapipe_pad(padding: int, size: int, k: int, s: int) -> int:
    return max(0, k - (size - 1) % s - 1) if padding == 1 else 0


def parse(op: Op, graph: Graph) -> Transposed | str:
    """The op's operands and geometry, or why it cannot run."""
    if op.code == MEDIAPIPE:
        if len(op.inputs) != 3:
            return "expects 3 inputs (input, weights, bias)"
        params = mediapipe_params(op)
        if params is None:
            return "custom options must hold 3 int32 (padding, stride_width, stride_height)"
        padding, sw, sh = params
        if min(sw, sh) < 1:
            return f"strides ({sh}, {sw}) must be >= 1"
        src, w = op.inputs[0], op.inputs[1]
        _, kh, kw, _ = graph.tensors[w].shape
        _, ih, iw, _ = bhwc(graph, src)
        th, tw = _mediapipe_pad(padding, ih, kh, sh), _mediapipe_pad(padding, iw, kw, sw)
        return Transposed(src, w, op.inputs[2], sh, sw, th // 2, tw // 2)
    if len(op.inputs) not in (3, 4):
        return "expects 3 or 4 inputs (output_shape, weights, input[, bias])"
    padding = int(op.opt("padding", SAME) or 0)
    sh, sw = int(op.opt("stride_h", 1) or 0), int(op.opt("stride_w", 1) or 0)
    if min(sh, sw) < 1:
        return f"strides ({sh}, {sw}) must be >= 1"
    if padding not in (SAME, VALID):
        return f"padding mode {padding} is not supported"
    w = op.inputs[1]
    _, kh, kw, _ = graph.tensors[w].shape
    _, oh, ow, _ = bhwc(graph, op.outputs[0])
    pt = pad_before(padding, oh, kh, sh, 1, out_size(padding, oh, kh, sh))
    pl = pad_before(padding, ow, kw, sw, 1, out_size(padding, ow, kw, sw))
    return Transposed(op.inputs[2], w, op.inputs[3] if len(op.inputs) > 3 else -1, sh, sw, pt, pl)


class TransposeConvKernel:
    ops = ("TRANSPOSE_CONV", MEDIAPIPE)

    def supports(self, op: Op, graph: Graph) -> str | None:
        if len(op.outputs) != 1 or not op.inputs:
            return "unexpected number of inputs/outputs"
        if op.code == "TRANSPOSE_CONV" and op.inputs[0] >= 0 and not is_const(graph, op.inputs[0]):
            return "output_shape must be constant"
        p = parse(op, graph)
        if isinstance(p, str):
            return p
        reason = float_tensors(op, graph) or activation_supported(op)
        if reason:
            return reason
        if is_const(graph, p.src):
            return "constant input tensors are not supported"
        for t in (p.src, p.weights, op.outputs[0]):
            if len(graph.tensors[t].shape) != 4:
                return f"tensor {graph.tensors[t].name!r} must have rank 4"
        if not is_const(graph, p.weights):
            return "weights must be constant"
        b, ih, iw, ic = bhwc(graph, p.src)
        ob, oh, ow, oc = bhwc(graph, op.outputs[0])
        o, kh, kw, wi = graph.tensors[p.weights].shape
        if (o, wi) != (oc, ic) or ob != b:
            return f"weights {graph.tensors[p.weights].shape} do not match input {ic} / output {oc} channels"
        if p.bias >= 0 and (not is_const(graph, p.bias) or graph.tensors[p.bias].size != oc):
            return "bias must be a constant with one value per output channel"
        if op.code == "TRANSPOSE_CONV":
            shape = tuple(int(v) for v in np.asarray(graph.tensors[op.inputs[0]].data).reshape(-1))
            if shape != tuple(graph.tensors[op.outputs[0]].shape):
                out_shape = graph.tensors[op.outputs[0]].shape
                return f"output_shape {shape} differs from the output tensor's {out_shape}"
            padding = int(op.opt("padding", SAME) or 0)
            want = (out_size(padding, oh, kh, p.sh), out_size(padding, ow, kw, p.sw))
            if want != (ih, iw):  # TFLite refuses these at prepare
                return f"input size {(ih, iw)} does not fit output_shape {shape} (expects {want})"
        else:
            padding = mediapipe_params(op)[0]  # type: ignore[index]
            want = (
                (ih - 1) * p.sh + kh - _mediapipe_pad(padding, ih, kh, p.sh),
                (iw - 1) * p.sw + kw - _mediapipe_pad(padding, iw, kw, p.sw),
            )
            if (oh, ow) != want:
                return f"output size {(oh, ow)} differs from the op's {want}"
        return None

    def build(self, op: Op, graph: Graph) -> Lowering:
        p = parse(op, graph)
        assert not isinstance(p, str), p
        bias = const_f32(graph, p.bias).reshape(-1) if p.bias >= 0 else None
        return [
            transpose_spec(
                graph, p, const_f32(graph, p.weights), bias, op.outputs[0], activation(op), op.code
            )
        ]


def transpose_spec(
    graph: Graph,
    p: Transposed,
    w: np.ndarray,
    bias: np.ndarray | None,
    dst: int,
    epilogue: list[Code],
    label: str,
) -> KernelSpec:
    b, ih, iw, ic = bhwc(graph, p.src)
    _, oh, ow, oc = bhwc(graph, dst)
    _, kh, kw, _ = w.shape
    si, so = -(-ic // 4), -(-oc // 4)
    st = 2 if so >= 2 else 1
    sg = -(-so // st)
    init = [f"var acc_{j} = vec4<f32>(bias[os0 + {j}u]);" for j in range(st)]
    taps = [f"acc_{j} += vec4<f32>(weights[wi + {j * kh * kw * si}u] * s);" for j in range(st)]
    store = [f"store(acc_{j}, ob, oy, ox, os0 + {j}u);" for j in range(st)]
    params = {
        "SG": sg,
        "ST": st,
        "SO": so,
        "OH": oh,
        "OW": ow,
        "IH": ih,
        "IW": iw,
        "SI": si,
        "KH": kh,
        "KW": kw,
        "SH": p.sh,
        "SW": p.sw,
        "PT": p.pad_top,
        "PL": p.pad_left,
        "PLANE": ih * iw,
        "ACC_INIT": lines(init, 2),
        "TAPS": lines(taps, 8),
        "STORE": lines(store, 2),
    }
    bindings = [
        Binding("src", tensor=p.src),
        Binding("weights", data=weight_blocks(w, sg * st), element="SM"),
        Binding("bias", data=bias_vec4(bias, oc, sg * st)),
        Binding("dst", tensor=dst, writable=True),
    ]
    return KernelSpec(
        "transpose_conv",
        params,
        bindings,
        grid=(ow, oh, b * sg),
        epilogue=epilogue,
        out_channels=oc,
        label=f"{label} {kh}x{kw} s{p.sh}x{p.sw}",
    )


KERNEL = TransposeConvKernel()
