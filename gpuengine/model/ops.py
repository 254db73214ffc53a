"""The op vocabulary: the engine's own (fused) op codes, the option keys passes write and kernels read, and the
data those options hold. Passes build these ops, kernels lower them, so both import them from here.

Builtin TFLite op codes are the strings the reader decodes (`Op.code`, e.g. "FULLY_CONNECTED"); what each means
(shape, validation, folding, float64 reference) is found from one row per op code in
`gpuengine/op_table.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import Graph, Op

# -- padding and window geometry (TFLite's Padding enum, ComputeOutSize) ------------------------------------------

SAME, VALID = 0, 1


def out_size(padding: int, size: int, k: int, stride: int, dilation: int = 1) -> int:
    """TFLite's ComputeOutSize: the output length of a window of `k` taps over `size` elements."""
    effective = (k - 1) * dilation + 1
    return (size + stride - 1) // stride if padding == SAME else (size + stride - effective) // stride


# -- fused ops: made by a pass, never read from a model ------------------------------------------------------------

ATTENTION = "ATTENTION"  # softmax(scale * Q K^T [+ mask_scale * mask]) V (passes/fuse_attention.py)
KV_CACHE_WRITE = "KV_CACHE_WRITE"  # a signature's KV cache updated in place (passes/kv_cache_in_place.py)
LAYER_NORM = "LAYER_NORM"  # (x - mean) * inv * scale + offset (passes/fuse_normalization.py)
RMS_NORM = "RMS_NORM"  # x * inv * scale + offset
ROPE = "ROPE"  # rotary position embedding (passes/fuse_rope.py)
ELEMENTWISE_TREE = "ELEMENTWISE_TREE"  # a tree of elementwise ops over one x (passes/fuse_elementwise_tree.py)
FUSED_OPS = (ATTENTION, KV_CACHE_WRITE, LAYER_NORM, RMS_NORM, ROPE, ELEMENTWISE_TREE)

# -- option keys ---------------------------------------------------------------------------------------------------

# ATTENTION
ATTENTION_VIEWS = ("view_q", "view_k", "view_v")  # ViewSteps from each stored operand to the logical one
K_ADJ = "k_adj"
SCALE = "scale"
MASK_SCALE = "mask_scale"  # with a 4th input (an additive mask): logits = scale * QK^T + mask_scale * mask
KV_GROUP = "kv_group"  # query heads per K/V head (grouped-query attention); absent or 1: K/V batch like Q's
# True: few queries over many keys in one workgroup a row (keys split within it), not flash-decoding's key chunks
# over workgroups (passes/choose_attention_split.py, where the latency model predicts it faster)
ONE_DISPATCH = "one_dispatch"
# ATTENTION, LAYER_NORM, RMS_NORM: the model's op codes the pass replaced (named by inspect's labels)
SOURCE_OPS = "source_ops"
# ATTENTION and BATCH_MATMUL / FULLY_CONNECTED (passes/fold_matmul_layout.py): ViewSteps from the logical output
OUT_VIEW = "view_out"

# BATCH_MATMUL / FULLY_CONNECTED
MATMUL_VIEWS = ("view_a", "view_b")  # ViewSteps from the stored operands (passes/fold_matmul_layout.py)
HYBRID_ARITHMETIC = "hybrid_arithmetic"  # passes/hybrid_arithmetic.py: "float", else integer arithmetic
GATED_OPTION = "gated"  # act(gate) * up of interleaved rows: "SILU", "GELU_TANH" or "GELU"
NORM = "norm"  # (scale tensor, offset tensor, epsilon, eps_outside, label) of an RMS_NORM of the input
# FULLY_CONNECTED with a NORM (passes/fuse_residual_norm.py): its input row is x + RMS_NORM(o) (a post-norm and the
# residual ADD, Gemma's sandwich norms), computed in the prologue: (input index of o, scale tensor, offset tensor,
# epsilon, eps_outside, label); input 0 is x; output 1, where the op has one, is the row x + RMS_NORM(o) itself
RESIDUAL_NORM = "residual_norm"
# FULLY_CONNECTED (passes/fuse_kv_write_into_projection.py): the KV_CACHE_WRITE reading the projection's output
# computed in its store: (the projection's own output tensor, how many of the op's inputs are the projection's,
# the write's option fields as sorted (key, value) pairs); the op's other inputs (-1 where the write read the
# projection's output) and its outputs are the write's
KV_EPILOGUE = "kv_epilogue"
# FULLY_CONNECTED, internal to lowering (kernels/kv_epilogue.py): the output slices come in pairs that the store
# hands together to `scatter(lo, hi, pair)`
SCATTER_PAIRS = "scatter_pairs"

# LAYER_NORM / RMS_NORM
EPSILON = "epsilon"  # the constant added to the variance (or to its square root)
EPS_OUTSIDE = "eps_outside"  # inv = 1 / (sqrt(var) + eps) instead of 1 / sqrt(var + eps)

# ROPE
VIEW_X = "view_x"

# KV_CACHE_WRITE
VIEW_UPDATE = "view_update"
ROPE_TABLES = "rope"  # inputs 3 and 4 are cos and sin: the update is rotated as it is written
GROUPS = "groups"  # several writes in one dispatch: ((inputs, view, rope[, kind]), ...), one output each
QUERY = "query"  # a group's kind: a rotated tensor (ROPE) rather than a cache write
# KV_CACHE_WRITE and ROPE (passes/fold_position_math.py): True: the rotation's cos / sin inputs are the step's
# position (an int32 of one element) and the inverse frequencies; the kernel computes cos / sin(f32(position) *
# frequency). ("rows", wrap): position and a [R + 1, 2H] table of cos | sin rows, read at the position (+ R where
# negative when wrap; row R, the fill, out of [0, R))
ROPE_ANGLES = "rope_angles"
# KV_CACHE_WRITE: the offsets input is the position (int32, one element); the offsets are this tuple with the
# position where it holds None (litert-torch's PACK([0, position, 0, 0])); with GROUPS, one such tuple per group
# (None for a rotated query's)
OFFSETS_FROM_POSITION = "offsets_from_position"
# ATTENTION (passes/fold_position_math.py): inputs 3 and 4 are a mask table [R + 1, N] and the position; the mask is
# row position of the table (position + R where negative: `wrap`; row R, the out-of-range fill, where outside
# [0, R)): (logical mask shape, wrap, window); window None, or (below, above, inside, outside, row first): the
# row's minimum with `inside` at the columns j with position - below < j < position + above, `outside` elsewhere
# (Gemma 3's sliding window; row first: the row is MINIMUM's first operand)
MASK_FROM_POSITION = "mask_from_position"

# ELEMENTWISE_TREE and the inputs of conv / reduction ops (passes/fuse_input_expression.py)
TREE_OPTION = "tree"  # an ELEMENTWISE_TREE op's ExpressionSteps
PROLOGUE_OPTION = "prologue"  # ExpressionSteps evaluated by the kernel as it loads input 0


# -- the data options hold -----------------------------------------------------------------------------------------

VIEW_OPS = ("RESHAPE", "TRANSPOSE")
# SLICE: made by passes/merge_projections.py (a part of a merged output); BROADCAST: a BROADCAST_TO of the same rank
# (grouped-query attention repeating each KV head, passes/fold_attention_operands.py): size-1 axes read index 0
STEP_KINDS = (*VIEW_OPS, "SLICE", "BROADCAST")


@dataclass(frozen=True)
class ViewStep:
    """One layout op folded into a kernel's read or write (lowering/kernels/layout_view.py): input shape -> output shape
    (TRANSPOSE: out axis j is input axis perm[j]; SLICE: `perm` holds the begin offsets)."""

    kind: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    perm: tuple[int, ...] = ()


@dataclass(frozen=True)
class ExpressionStep:
    """One elementwise op absorbed into a tree (lowering/kernels/prologue.py). `op` gives its code and options (its
    tensors are not read again); `args` gives each operand: k >= 0 is the consumer's input k, a negative value -1 - j
    the result of step j."""

    op: Op
    args: tuple[int, ...]


def leaf_kind(graph: Graph, tensor: int, shape: tuple[int, ...]) -> str | None:
    """How a tree's leaf is read at an element of a rank-4 `shape`: 'full', 'channel', 'batch_channel', 'scalar',
    or None when a tree cannot read it."""
    t = graph.tensors[tensor]
    if t.dtype != np.float32 and t.data is None:
        return None
    if t.data is not None:
        if t.size == 1:
            return "scalar"
        squeezed = tuple(t.shape[next((i for i, d in enumerate(t.shape) if d != 1), len(t.shape)):])
        if squeezed == (shape[3],) and len(t.shape) <= 4:
            return "channel"
    if tuple(t.shape) == tuple(shape):
        return "full"
    if t.data is None and len(t.shape) == 4 and t.shape[1:] == (1, 1, shape[3]):
        return "channel" if t.shape[0] == 1 else ("batch_channel" if t.shape[0] == shape[0] else None)
    return None


def flat_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """The rank-2 shape whose PHWC4 storage is the BHWC bytes of `shape` (last axis % 4 == 0): how a KV cache
    write sees its cache."""
    return int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])
