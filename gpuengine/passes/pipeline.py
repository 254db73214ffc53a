"""The fixed, documented order of graph transformations. Each pass is a pure Graph -> Graph function.

Order (why): fold constants first (weights become plain float32, shape chains vanish); then drop no-ops (so the
patterns below see real producers); a GATHER of an int8 / int4 table and its DEQUANTIZE into one GATHER reading the
table packed; LayerNorm / RMSNorm written as ops into one op each (before any pass below
takes a piece of them: their MULs and ADDs would otherwise be fused or folded one by one); the RESHAPE / TRANSPOSE
ops around a BATCH_MATMUL into its reads and writes (before epilogue fusion sees its output); QK^T, scale, SOFTMAX
and ·V into one attention op (after the layout fold, whose views it keeps); rotary embeddings into one ROPE op
(before the elementwise fusions take its MULs); the copies and scalar MULs in front of the attention's operands (a
KV cache's transpose and grouped-query broadcast) into its views and scale (K/V heads repeated for grouped-query
attention by RESHAPE/BROADCAST_TO alone went into its kv_group just before); then a signature's KV cache write in
place (after those folds: it needs the attention to read the cache through views); the decode step's position
math (RoPE angles, the mask row, the cache offsets) into the writes and attentions that read it (after the writes
exist); flash-decoding or one dispatch for each decode attention, by the latency model (after the folds, so it
predicts the op as it will run); a gated MLP's gate and up
projections and their SiLU gating into one FULLY_CONNECTED (before elementwise fusion takes its LOGISTIC, MULs); an
RMSNorm into the one projection reading it (after that merge, so the merged MLP projection takes it); a post-norm
and its residual ADD (Gemma's sandwich norms) into the normed projection reading the sum, and a decode step's KV
cache write (with the rotated query) into the QKV projection computing its rows as its epilogue (both after the
RMSNorm prologue, so the latency model weighs the projections as they will run); collapse
SPACE_TO_BATCH -> conv -> BATCH_TO_SPACE into one dilated conv (so the scale fold below sees the conv next to its
batch-norm MUL/ADD); fold scales into convs (changes weights, must precede the padding merge that changes the
conv's options); merge spatial PAD into convs; 1x1 convs on 1x1 maps -> FULLY_CONNECTED (after the merges, which
only target convs); channel PAD into the residual ADD that reads it; global average pool -> MEAN; then elementwise
trees that no producer can host as an epilogue into the 1x1 conv or reduction reading them (after pool_to_mean,
which makes such readers); last, trees over one tensor x (swish, hard-swish, GELU written as ops) into one
ELEMENTWISE_TREE op that the producer of x hosts as an epilogue. That one runs after fuse_input_expression, which
leaves trees whose run-time leaf has a producer to that producer: where x has none (a partition input), the 1x1
conv or reduction reading the tree evaluates it while loading, with no dispatch of its own, where the merged op
would need one; and a tree op is no inline step, so merging first would hide its ops from the prologues. Before all
of them, with the model at hand: STABLEHLO_COMPOSITE ops replaced by their decomposition subgraphs
(inline_composites), so every pass sees the decomposition's ops; it is structural, so it runs with optimize=False
too (a composite kept whole could only run on LiteRT). drop_leading_units (after fold_constants) is required too:
rank-5 tensors with leading unit axes between reshapes (grouped-query attention) reach no kernel. Between the
required and the optional passes, hybrid_arithmetic marks hybrid int8 FULLY_CONNECTED ops with the arithmetic the
engine option asks for (structural too; before the merges, so merged projections keep the mark).
"""

from __future__ import annotations

from collections.abc import Callable

from ..latency.latency import Device
from ..model.ir import Graph, Model
from .attention_kv_group import attention_kv_group
from .choose_attention_split import choose_attention_split
from .conv_to_fully_connected import conv_to_fully_connected
from .dilated_conv import dilated_conv
from .drop_leading_units import drop_leading_units
from .fold_attention_operands import fold_attention_operands
from .fold_constants import fold_constants
from .fold_gather_dequantize import fold_gather_dequantize
from .fold_matmul_layout import fold_matmul_layout
from .fold_position_math import fold_position_math
from .fold_scale_into_conv import fold_scale_into_conv
from .fuse_attention import fuse_attention
from .fuse_elementwise_tree import fuse_elementwise_tree
from .fuse_input_expression import fuse_input_expression
from .fuse_kv_write_into_projection import fuse_kv_write_into_projection
from .fuse_norm_into_projection import fuse_norm_into_projection
from .fuse_normalization import fuse_normalization
from .fuse_residual_norm import fuse_residual_norm
from .fuse_rope import fuse_rope
from .hybrid_arithmetic import hybrid_arithmetic
from .inline_composites import inline_composites
from .kv_cache_in_place import kv_cache_in_place
from .merge_channel_pad import merge_channel_pad
from .merge_gated_projections import merge_gated_projections
from .merge_padding import merge_padding
from .merge_projections import merge_projections
from .pool_to_mean import pool_to_mean
from .remove_noops import remove_noops

# Always applied: load-time work that no kernel should ever see.
REQUIRED: list[Callable[[Graph], Graph]] = [fold_constants, drop_leading_units]
# Applied when optimize=True (the default); the switch exists to check that they change no result.
OPTIONAL: list[Callable[[Graph], Graph]] = [remove_noops, fold_gather_dequantize, fuse_normalization,
                                            fold_matmul_layout, fuse_attention,
                                            attention_kv_group, fuse_rope, fold_attention_operands,
                                            kv_cache_in_place, fold_position_math, choose_attention_split,
                                            merge_projections, merge_gated_projections, fuse_norm_into_projection,
                                            fuse_residual_norm, fuse_kv_write_into_projection,
                                            dilated_conv,
                                            fold_scale_into_conv, merge_padding, conv_to_fully_connected,
                                            merge_channel_pad, pool_to_mean, fuse_input_expression,
                                            fuse_elementwise_tree]


# Given the latency model's description of the device the plan is for: fusions that trade a dispatch for
# recomputation, decided by predicted time.
WITH_DEVICE: set[Callable[..., Graph]] = {fuse_norm_into_projection, choose_attention_split,
                                           fuse_residual_norm, fuse_kv_write_into_projection}

# Always applied first, given the model: passes that read the subgraphs other ops reference.
WITH_MODEL: list[Callable[[Graph, Model | None], Graph]] = [inline_composites]


def run_passes(graph: Graph, optimize: bool = True, model: Model | None = None, device: Device | None = None,
               hybrid: str = "integer") -> Graph:
    """`model`: the model the graph belongs to, where composites' decompositions are (None: left as they are).
    `device`: the latency model's description of the device the plan is for (None: WITH_DEVICE passes fuse
    wherever they can). `hybrid`: the arithmetic of hybrid FULLY_CONNECTED ops (passes/hybrid_arithmetic.py),
    marked after the required passes, before the optional ones (merged projections keep the mark)."""
    for with_model in WITH_MODEL:
        graph = with_model(graph, model)
    for p in REQUIRED:
        graph = p(graph)
    graph = hybrid_arithmetic(graph, hybrid)
    for p in OPTIONAL if optimize else []:
        graph = p(graph, device) if p in WITH_DEVICE else p(graph)
    return graph
