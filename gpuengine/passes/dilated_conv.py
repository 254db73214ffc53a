"""SPACE_TO_BATCH_ND -> VALID CONV_2D / DEPTHWISE_CONV_2D -> BATCH_TO_SPACE_ND (how TensorFlow emits a dilated
conv) becomes one conv with dilation = block size: three dispatches and two intermediate tensors become one.

Why it is exact: SPACE_TO_BATCH pads the input with zeros (P) and splits it into block_h x block_w phase
images; a VALID conv of phase (dy, dx) at (i, j) reads P[i*bh + dy + ky*bh, ...], i.e. the dilated VALID conv
of P at (i*bh + dy, j*bw + dx). BATCH_TO_SPACE interleaves the phases back (every position of the dilated
conv's output is covered) and crops. So the result is the dilated conv over x padded by (pad - crop) at the
start and (pad - crop) at the end; both must be non-negative to be expressible as explicit padding.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..model.ir import Graph, Op, Options
from . import kernel_support
from .graph_utils import const, same_grid, sole_consumer

TARGETS = {"CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions"}
SAME, VALID = 0, 1


def _block_and_pads(graph: Graph, op: Op) -> tuple[list[int], list[int]] | None:
    """([bh, bw], [top, bottom, left, right]) of a SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND with constant operands."""
    if len(op.inputs) != 3 or len(op.outputs) != 1 or len(graph.tensors[op.inputs[0]].shape) != 4:
        return None
    block, pads = const(graph, op.inputs[1]), const(graph, op.inputs[2])
    if block is None or pads is None or block.size != 2 or pads.size != 4:
        return None
    block_l, pads_l = [int(v) for v in block.reshape(-1)], [int(v) for v in pads.reshape(-1)]
    if min(block_l) < 1 or min(pads_l) < 0:
        return None
    return block_l, pads_l


def _padding_options(fields: dict[str, Any], pads: tuple[int, int, int, int], eff_h: int,
                     eff_w: int) -> dict[str, Any]:
    """SAME or VALID when they mean exactly these pads (LiteRT and every kernel variant know them), else the
    internal `explicit_padding` field."""
    top, bottom, left, right = pads
    fields = {k: v for k, v in fields.items() if k != "explicit_padding"}
    total_h, total_w = eff_h - 1, eff_w - 1  # SAME at stride 1: out = in, total = eff - 1, before = total // 2
    if pads == (0, 0, 0, 0):
        return {**fields, "padding": VALID}
    if (top, bottom, left, right) == (total_h // 2, total_h - total_h // 2, total_w // 2, total_w - total_w // 2):
        return {**fields, "padding": SAME}
    return {**fields, "padding": VALID, "explicit_padding": pads}


def _rewrite(graph: Graph, s2b: Op) -> Op | None:
    """The single dilated conv replacing s2b -> conv -> b2s, or None when the pattern does not provably match."""
    got = _block_and_pads(graph, s2b)
    if got is None:
        return None
    (bh, bw), (pt, pb, pl, pr) = got
    conv = sole_consumer(graph, s2b.outputs[0])
    if conv is None or conv.code not in TARGETS or conv.inputs[0] != s2b.outputs[0] \
            or s2b.outputs[0] in conv.inputs[1:] or len(conv.outputs) != 1:
        return None
    if conv.options is None or conv.options.kind != TARGETS[conv.code] or conv.opt("explicit_padding") is not None:
        return None
    if int(conv.opt("padding", SAME)) != VALID or int(conv.opt("stride_h", 1)) != 1 \
            or int(conv.opt("stride_w", 1)) != 1 or int(conv.opt("dilation_h_factor", 1) or 1) != 1 \
            or int(conv.opt("dilation_w_factor", 1) or 1) != 1:
        return None
    b2s = sole_consumer(graph, conv.outputs[0])
    if b2s is None or b2s.code != "BATCH_TO_SPACE_ND" or b2s.inputs[0] != conv.outputs[0]:
        return None
    if not same_grid(graph, s2b.inputs[0], s2b.outputs[0]) or not same_grid(graph, conv.outputs[0], b2s.outputs[0]):
        return None  # a requantizing copy would be lost
    got = _block_and_pads(graph, b2s)
    if got is None or got[0] != [bh, bw]:
        return None
    ct, cb, cl, cr = got[1]
    weights = const(graph, conv.inputs[1])
    if weights is None or weights.ndim != 4:
        return None
    _, kh, kw, _ = weights.shape
    b, h, w, _ = graph.tensors[s2b.inputs[0]].shape
    hp, wp = h + pt + pb, w + pl + pr
    if hp % bh or wp % bw:
        return None
    # Every intermediate shape must be what the arithmetic above assumes.
    hs, ws = hp // bh, wp // bw
    hy, wy = hs - kh + 1, ws - kw + 1
    oc = graph.tensors[conv.outputs[0]].shape[-1]
    if tuple(graph.tensors[s2b.outputs[0]].shape) != (b * bh * bw, hs, ws, graph.tensors[s2b.inputs[0]].shape[3]) \
            or tuple(graph.tensors[conv.outputs[0]].shape) != (b * bh * bw, hy, wy, oc) or min(hy, wy) < 1:
        return None
    out_shape = (b, hy * bh - ct - cb, wy * bw - cl - cr, oc)
    if tuple(graph.tensors[b2s.outputs[0]].shape) != out_shape or min(out_shape) < 1:
        return None
    pads = (pt - ct, pb - cb, pl - cl, pr - cr)
    if min(pads) < 0:
        return None
    fields = {**conv.options.fields, "dilation_h_factor": bh, "dilation_w_factor": bw}
    fields = _padding_options(fields, pads, (kh - 1) * bh + 1, (kw - 1) * bw + 1)
    merged = dataclasses.replace(conv, inputs=[s2b.inputs[0], *conv.inputs[1:]], outputs=list(b2s.outputs),
                                 options=Options(conv.options.kind, fields))
    # The conv kernels recompute the output size from padding and dilation: a mismatch is refused here.
    if kernel_support.check(merged, graph) is not None:
        return None
    return merged


def dilated_conv(graph: Graph) -> Graph:
    graph = graph.copy()
    for s2b in list(graph.ops):
        if s2b.code != "SPACE_TO_BATCH_ND" or s2b not in graph.ops:
            continue
        merged = _rewrite(graph, s2b)
        if merged is None:
            continue
        conv = sole_consumer(graph, s2b.outputs[0])
        b2s = sole_consumer(graph, conv.outputs[0]) if conv is not None else None
        graph.ops = [merged if o is conv else o for o in graph.ops if o is not s2b and o is not b2s]
    return graph

