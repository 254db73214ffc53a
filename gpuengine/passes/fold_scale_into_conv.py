"""Fold a constant per-channel (or scalar) MUL/ADD after a conv-like op into its weights and bias, and a
constant MUL before a conv into its weights: one dispatch and one tensor fewer each, same arithmetic."""

from __future__ import annotations

import numpy as np

from ..model.ir import Graph, Op
from .graph_utils import const, new_const, rounds, sole_consumer, with_fields

# op -> (weights input, bias input, output-channel axis of the weights, input-channel axis or None)
CONV_LIKE = {
    "CONV_2D": (1, 2, 0, 3),
    "DEPTHWISE_CONV_2D": (1, 2, 3, None),
    "FULLY_CONNECTED": (1, 2, 0, 1),
    "TRANSPOSE_CONV": (1, 3, 0, None),
    "Convolution2DTransposeBias": (1, 2, 0, None),
}


def _channel_vector(value: np.ndarray, channels: int) -> np.ndarray | None:
    """A constant that is a scalar or varies only along the last axis, as a [channels] vector."""
    if value.size == 1:
        return np.full(channels, float(value.reshape(-1)[0]), np.float32)
    if value.shape[-1] == channels and value.size == channels:
        return value.reshape(-1).astype(np.float32)
    return None


def _fold_after(graph: Graph, conv: Op) -> bool:
    w_in, b_in, out_axis, _ = CONV_LIKE[conv.code]
    if int(conv.opt("fused_activation_function", 0) or 0) != 0 or len(conv.outputs) != 1 \
            or rounds(graph, conv.outputs[0]):
        return False
    if conv.code == "TRANSPOSE_CONV" and len(conv.inputs) < 4:
        return False
    weights = const(graph, conv.inputs[w_in])
    if weights is None or weights.dtype != np.float32:
        return False
    nxt = sole_consumer(graph, conv.outputs[0])
    if nxt is None or nxt.code not in ("MUL", "ADD") or len(nxt.inputs) != 2:
        return False
    if int(nxt.opt("fused_activation_function", 0) or 0) and conv.options is None:
        return False  # (MediaPipe's custom transposed conv has no options to carry the activation)
    other = nxt.inputs[1] if nxt.inputs[0] == conv.outputs[0] else nxt.inputs[0]
    value = const(graph, other)
    channels = weights.shape[out_axis]
    if value is None or graph.tensors[nxt.outputs[0]].shape != graph.tensors[conv.outputs[0]].shape:
        return False
    vec = _channel_vector(value, channels)
    if vec is None:
        return False
    bias_t = conv.inputs[b_in] if b_in < len(conv.inputs) else -1
    bias = const(graph, bias_t) if bias_t >= 0 else np.zeros(channels, np.float32)
    if bias is None:
        return False
    if nxt.code == "MUL":
        shape = [1] * weights.ndim
        shape[out_axis] = channels
        weights = weights * vec.reshape(shape)
        bias = bias * vec
    else:
        bias = bias + vec
    inputs = list(conv.inputs)
    while len(inputs) <= b_in:
        inputs.append(-1)
    inputs[w_in] = new_const(graph, conv.inputs[w_in], weights, graph.tensors[conv.inputs[w_in]].name + "/folded")
    ref = conv.inputs[w_in]
    inputs[b_in] = new_const(graph, ref, bias.astype(np.float32), graph.tensors[ref].name + "/bias_folded")
    conv.inputs = inputs
    act = int(nxt.opt("fused_activation_function", 0) or 0)
    if act:
        conv.options = with_fields(conv, fused_activation_function=act).options
    conv.outputs = list(nxt.outputs)
    graph.ops = [o for o in graph.ops if o is not nxt]
    return True


def _fold_before(graph: Graph, mul: Op) -> bool:
    if mul.code != "MUL" or int(mul.opt("fused_activation_function", 0) or 0) != 0 or len(mul.inputs) != 2:
        return False
    consts = [t for t in mul.inputs if const(graph, t) is not None]
    if len(consts) != 1:
        return False
    src = mul.inputs[1] if consts[0] == mul.inputs[0] else mul.inputs[0]
    if graph.tensors[src].shape != graph.tensors[mul.outputs[0]].shape or rounds(graph, mul.outputs[0]):
        return False
    conv = sole_consumer(graph, mul.outputs[0])
    if conv is None or conv.code not in CONV_LIKE or conv.inputs[0] != mul.outputs[0]:
        return False
    w_in, _, _, in_axis = CONV_LIKE[conv.code]
    weights = const(graph, conv.inputs[w_in])
    if weights is None or weights.dtype != np.float32:
        return False
    in_channels = graph.tensors[src].shape[-1]
    vec = _channel_vector(const(graph, consts[0]), in_channels)
    if vec is None:
        return False
    if conv.code == "DEPTHWISE_CONV_2D":
        multiplier = weights.shape[3] // in_channels
        weights = weights * np.repeat(vec, multiplier).reshape(1, 1, 1, -1)
    elif in_axis is not None and weights.shape[in_axis] == in_channels:
        shape = [1] * weights.ndim
        shape[in_axis] = in_channels
        weights = weights * vec.reshape(shape)
    else:
        return False
    inputs = list(conv.inputs)
    inputs[0] = src
    inputs[w_in] = new_const(graph, conv.inputs[w_in], weights, graph.tensors[conv.inputs[w_in]].name + "/prescaled")
    conv.inputs = inputs
    graph.ops = [o for o in graph.ops if o is not mul]
    return True


def fold_scale_into_conv(graph: Graph) -> Graph:
    graph = graph.copy()
    changed = True
    while changed:
        changed = False
        for op in list(graph.ops):
            if op in graph.ops and ((op.code in CONV_LIKE and _fold_after(graph, op)) or _fold_before(graph, op)):
                changed = True
    return graph
