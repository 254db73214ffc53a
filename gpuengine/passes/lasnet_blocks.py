"""Find LASNet-style spatially masked residual blocks: the pattern sparse execution (runtime/sparse_block.py) runs.

As a Keras-built LASNet-style block converts to TFLite (tests/fixtures/lasnet, scripts/dev/make_lasnet_model.py):

    logit = CONV_2D 1x1 (AVERAGE_POOL_2D cell x cell (x))        the masker, one value per cell
    mask  = RESIZE_NEAREST_NEIGHBOR (CAST float32 (GREATER (logit, threshold)))   back to x's resolution
    y     = ADD (x, MUL (CONV_2D 3x3 (CONV_2D 3x3 (x)), mask))   the residual branch, zeroed where the mask is 0

Where the mask is 0 the block's output is x itself, so only the cells (patches) the masker keeps need the convs.
This module only finds the pattern and collects what sparse execution needs (weights, cell, threshold); it
rewrites nothing (the engine's compile path does not use sparse execution yet: see docs/design/lasnet.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.ir import Graph, Op

__all__ = ["MaskedBlock", "find_masked_blocks"]

SAME, VALID = 0, 1  # TFLite's Padding enum
NONE, RELU = 0, 1  # TFLite's ActivationFunctionType values the block may use


@dataclass
class MaskedBlock:
    """One masked residual block: x [1, H, W, C] -> out, with the masker and the two 3x3 convs' parameters."""

    x: int
    out: int
    ops: list[int]  # every op of the block (masker, convs, MUL, ADD), in graph order
    cell: int  # the masker's cell (pooling window and upsampling factor)
    masker_weights: np.ndarray  # [C] float32
    masker_bias: float
    threshold: float
    conv1: tuple[np.ndarray, np.ndarray]  # weights [C, 3, 3, C] (OHWI), bias [C]
    conv1_relu: bool
    conv2: tuple[np.ndarray, np.ndarray]
    shape: tuple[int, int, int]  # x's H, W, C


def _const(graph: Graph, t: int) -> np.ndarray | None:
    return None if t < 0 or graph.tensors[t].data is None else np.asarray(graph.tensors[t].data)


def _conv3x3(graph: Graph, op: Op, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The weights and bias of a 3x3 stride-1 SAME conv from `channels` to `channels`, or None."""
    if op.code != "CONV_2D" or len(op.inputs) < 3:
        return None
    w, b = _const(graph, op.inputs[1]), _const(graph, op.inputs[2])
    if w is None or b is None or w.dtype != np.float32 or w.shape != (channels, 3, 3, channels):
        return None
    if (op.opt("padding"), op.opt("stride_w"), op.opt("stride_h")) != (SAME, 1, 1) or \
            op.opt("dilation_w_factor", 1) != 1 or op.opt("dilation_h_factor", 1) != 1:
        return None
    return w.astype(np.float32), b.astype(np.float32).reshape(channels)


def _match(graph: Graph, add_i: int, producers: dict[int, int], consumers: dict[int, list[int]]) -> MaskedBlock | None:
    add = graph.ops[add_i]
    if add.code != "ADD" or add.opt("fused_activation_function", NONE) != NONE or len(add.inputs) != 2:
        return None
    for x, mul_t in (add.inputs, add.inputs[::-1]):
        mul_i = producers.get(mul_t)
        if mul_i is None or graph.ops[mul_i].code != "MUL":
            continue
        block = _match_branch(graph, add_i, x, mul_i, producers, consumers)
        if block is not None:
            return block
    return None


def _match_branch(graph: Graph, add_i: int, x: int, mul_i: int, producers: dict[int, int],
                  consumers: dict[int, list[int]]) -> MaskedBlock | None:
    mul = graph.ops[mul_i]
    xt = graph.tensors[x]
    if len(xt.shape) != 4 or xt.shape[0] != 1 or np.dtype(xt.dtype) != np.float32 or \
            mul.opt("fused_activation_function", NONE) != NONE:
        return None
    _, h, w, c = (int(d) for d in xt.shape)
    for branch_t, mask_t in (mul.inputs, mul.inputs[::-1]):
        conv2_i, resize_i = producers.get(branch_t), producers.get(mask_t)
        if conv2_i is None or resize_i is None:
            continue
        conv2 = _conv3x3(graph, graph.ops[conv2_i], c)
        conv1_i = producers.get(graph.ops[conv2_i].inputs[0])
        if conv2 is None or graph.ops[conv2_i].opt("fused_activation_function", NONE) != NONE or conv1_i is None:
            continue
        conv1_op = graph.ops[conv1_i]
        conv1 = _conv3x3(graph, conv1_op, c)
        act = conv1_op.opt("fused_activation_function", NONE)
        if conv1 is None or conv1_op.inputs[0] != x or act not in (NONE, RELU):
            continue
        masker = _match_mask(graph, resize_i, x, h, w, c, producers)
        if masker is None:
            continue
        ops, cell, mw, mb, thr = masker
        ops = sorted([*ops, conv1_i, conv2_i, mul_i, add_i])
        inner = {t for i in ops for t in graph.ops[i].outputs} - {graph.ops[add_i].outputs[0]}
        if any(t in graph.outputs or any(j not in ops for j in consumers.get(t, [])) for t in inner):
            continue  # an intermediate is used outside the block: it must be computed densely
        return MaskedBlock(x, graph.ops[add_i].outputs[0], ops, cell, mw, mb, thr, conv1,
                           conv1_op.opt("fused_activation_function", NONE) == RELU, conv2, (h, w, c))
    return None


def _match_mask(graph: Graph, resize_i: int, x: int, h: int, w: int, c: int,
                producers: dict[int, int]) -> tuple[list[int], int, np.ndarray, float, float] | None:
    """The masker ops from RESIZE_NEAREST_NEIGHBOR back to x: (ops, cell, weights [C], bias, threshold)."""
    resize = graph.ops[resize_i]
    if resize.code != "RESIZE_NEAREST_NEIGHBOR" or resize.opt("align_corners", False):
        return None
    if tuple(int(d) for d in graph.tensors[resize.outputs[0]].shape) != (1, h, w, 1):
        return None
    cast_i = producers.get(resize.inputs[0])
    if cast_i is None or graph.ops[cast_i].code != "CAST" or \
            np.dtype(graph.tensors[graph.ops[cast_i].outputs[0]].dtype) != np.float32:
        return None
    greater_i = producers.get(graph.ops[cast_i].inputs[0])
    if greater_i is None or graph.ops[greater_i].code != "GREATER":
        return None
    logit_t, thr_t = graph.ops[greater_i].inputs
    thr = _const(graph, thr_t)
    masker_i = producers.get(logit_t)
    if thr is None or thr.size != 1 or masker_i is None:
        return None
    masker = graph.ops[masker_i]
    mw = _const(graph, masker.inputs[1]) if masker.code == "CONV_2D" and len(masker.inputs) >= 2 else None
    mb = _const(graph, masker.inputs[2]) if masker.code == "CONV_2D" and len(masker.inputs) >= 3 else None
    if mw is None or mw.shape != (1, 1, 1, c) or masker.opt("fused_activation_function", NONE) != NONE or \
            (masker.opt("stride_w"), masker.opt("stride_h")) != (1, 1):
        return None
    pool_i = producers.get(masker.inputs[0])
    pool = graph.ops[pool_i] if pool_i is not None else None
    if pool is None or pool.code != "AVERAGE_POOL_2D" or pool.inputs[0] != x:
        return None
    cell = pool.opt("filter_width")
    if cell is None or (pool.opt("filter_height"), pool.opt("stride_w"), pool.opt("stride_h")) != (cell, cell, cell) \
            or pool.opt("padding") != VALID or pool.opt("fused_activation_function", NONE) != NONE \
            or h % cell or w % cell:
        return None
    bias = 0.0 if mb is None else float(np.asarray(mb).reshape(-1)[0])
    return ([pool_i, masker_i, greater_i, cast_i, resize_i], int(cell), mw.reshape(c).astype(np.float32), bias,
            float(thr.reshape(-1)[0]))


def find_masked_blocks(graph: Graph) -> list[MaskedBlock]:
    """Every masked residual block of `graph` (module docstring), each op in at most one block."""
    producers, consumers = graph.producers(), graph.consumers()
    blocks: list[MaskedBlock] = []
    taken: set[int] = set()
    for i, op in enumerate(graph.ops):
        if op.code != "ADD":
            continue
        block = _match(graph, i, producers, consumers)
        if block is not None and not taken & set(block.ops):
            blocks.append(block)
            taken |= set(block.ops)
    return blocks
