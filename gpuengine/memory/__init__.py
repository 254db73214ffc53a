"""Intermediate-tensor memory planning (Lee et al. 2019, section 5; TFLite GPU delegate).

Pure functions from tensor usage records to plans; nothing here touches the GPU.
"""

from .bounds import lower_bound
from .exact import aligned_lower_bound, plan_offsets
from .greedy import plan_greedy
from .mincostflow import plan_mincostflow
from .naive import plan_naive
from .offsets import DEFAULT_ALIGNMENT, plan_greedy_by_size
from .plan import MemoryPlan
from .records import UsageRecord, lifetimes_overlap, records_from_schedule
from .report import compare, format_table, plot
from .strategies import STRATEGIES, plan_memory
from .tflite import (
    plan_greedy_best,
    plan_greedy_by_breadth,
    plan_greedy_by_size_dist_priority,
    plan_greedy_in_order,
    positional_maximums,
)

__all__ = [
    "DEFAULT_ALIGNMENT",
    "STRATEGIES",
    "aligned_lower_bound",
    "MemoryPlan",
    "UsageRecord",
    "compare",
    "format_table",
    "lifetimes_overlap",
    "lower_bound",
    "plan_greedy",
    "plan_greedy_best",
    "plan_greedy_by_breadth",
    "plan_greedy_by_size_dist_priority",
    "plan_greedy_in_order",
    "plan_greedy_by_size",
    "plan_memory",
    "plan_mincostflow",
    "plan_naive",
    "plan_offsets",
    "plot",
    "positional_maximums",
    "records_from_schedule",
]
