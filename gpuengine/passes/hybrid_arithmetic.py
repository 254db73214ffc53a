"""Mark each hybrid FULLY_CONNECTED (float activations, int8 weights) with the arithmetic the engine option
`hybrid_arithmetic` asks for.

"integer" (the default) leaves the ops as they are: the kernel quantizes each activation row as LiteRT's XNNPACK
does and sums int8 products in i32, giving LiteRT's numbers. "float" sets the op field HYBRID_ARITHMETIC, and the
kernel then multiplies the float activations by the weights dequantized in registers (q * scale of the channel),
summing in f32: the weights stay packed int8 either way. The mark is structural (it runs with optimize=False too)
and comes before the optional passes, so a merged projection (merge_projections, merge_gated_projections) keeps it
and fusions that weigh kernels by predicted time (fuse_norm_into_projection) weigh the kernel that will run.
"""

from __future__ import annotations

from ..model.ir import Graph
from ..model.ops import HYBRID_ARITHMETIC
from ..model.quantization import is_hybrid
from .graph_utils import with_fields

ARITHMETICS = ("integer", "float")


def hybrid_arithmetic(graph: Graph, arithmetic: str = "integer") -> Graph:
    """The graph with every hybrid FULLY_CONNECTED marked to compute in `arithmetic` (one of ARITHMETICS)."""
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"hybrid_arithmetic {arithmetic!r} is not one of {', '.join(ARITHMETICS)}")
    if arithmetic == "integer":
        return graph
    graph = graph.copy()
    for i, op in enumerate(graph.ops):
        if op.code == "FULLY_CONNECTED" and len(op.inputs) >= 2 and op.inputs[1] >= 0 and is_hybrid(op, graph):
            graph.ops[i] = with_fields(op, **{HYBRID_ARITHMETIC: arithmetic})
    return graph
