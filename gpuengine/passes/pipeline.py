"""The fixed, documented order of graph transformations. Each pass is a pure Graph -> Graph function.

Order (why): fold constants first (weights become plain float32, shape chains vanish); then drop no-ops
(so the patterns below see real producers); fold scales into convs (changes weights, must precede the
padding merge that changes the conv's options); merge spatial PAD into convs and channel PAD into the
residual ADD that reads it; global average pool -> MEAN.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model.ir import Graph
from .fold_constants import fold_constants
from .fold_scale_into_conv import fold_scale_into_conv
from .merge_channel_pad import merge_channel_pad
from .merge_padding import merge_padding
from .pool_to_mean import pool_to_mean
from .remove_noops import remove_noops

# Always applied: load-time work that no kernel should ever see.
REQUIRED: list[Callable[[Graph], Graph]] = [fold_constants]
# Applied when optimize=True (the default); the switch exists to check that they change no result.
OPTIONAL: list[Callable[[Graph], Graph]] = [remove_noops, fold_scale_into_conv, merge_padding, merge_channel_pad,
                                            pool_to_mean]


def run_passes(graph: Graph, optimize: bool = True) -> Graph:
    for p in REQUIRED + (OPTIONAL if optimize else []):
        graph = p(graph)
    return graph
