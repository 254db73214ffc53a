"""Tensor usage records: the only input the memory planners need.

A record says how many bytes a tensor needs and over which steps of the execution order it must stay
intact.  Planners never look at the graph itself, which keeps them pure and easy to test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["UsageRecord", "lifetimes_overlap", "records_from_schedule", "check_records"]


@dataclass(frozen=True)
class UsageRecord:
    """Lifetime of one intermediate tensor.

    ``first`` is the step (op index in execution order) that writes the tensor, ``last`` the last step
    that reads it.  Both ends are inclusive, so a tensor is live over ``[first, last]``; an op's output
    therefore always overlaps the op's inputs and never shares their storage.
    """

    tensor: int
    size: int
    first: int
    last: int

    def __post_init__(self) -> None:
        # Fail at construction: a bad record would otherwise surface as a silently wrong plan.
        if self.size < 0:
            raise ValueError(f"tensor {self.tensor}: negative size {self.size}")
        if self.first < 0:
            raise ValueError(f"tensor {self.tensor}: negative first step {self.first}")
        if self.first > self.last:
            raise ValueError(f"tensor {self.tensor}: first step {self.first} > last step {self.last}")


def lifetimes_overlap(a: UsageRecord, b: UsageRecord) -> bool:
    """True if ``a`` and ``b`` are live at a common step and so must not share memory."""
    return not (a.last < b.first or b.last < a.first)


def check_records(records: Iterable[UsageRecord]) -> list[UsageRecord]:
    """Return ``records`` as a list after checking tensor ids are unique (plans are keyed by them)."""
    out = list(records)
    seen: set[int] = set()
    for r in out:
        if not isinstance(r, UsageRecord):
            raise TypeError(f"expected UsageRecord, got {type(r).__name__}")
        if r.tensor in seen:
            raise ValueError(f"duplicate usage record for tensor {r.tensor}")
        seen.add(r.tensor)
    return out


def records_from_schedule(
    sizes: Mapping[int, int],
    producers: Mapping[int, int],
    consumers: Mapping[int, Sequence[int]],
    num_ops: int,
) -> list[UsageRecord]:
    """Build usage records from a scheduled graph.

    ``sizes`` lists the tensors to plan (bytes each), ``producers`` maps each to the index of the op that
    writes it and ``consumers`` to the indices of the ops that read it (missing or empty: nobody reads it,
    so it only lives during its producer step).  Indices are positions in execution order, ``0 <= i <
    num_ops``.  Raises ``ValueError`` on anything that cannot be a valid schedule, e.g. a tensor read
    before or by the op that writes it.  Records come back sorted by ``(first, tensor)``.
    """
    if num_ops < 0:
        raise ValueError(f"num_ops must be >= 0, got {num_ops}")

    def check_op(op: int, what: str) -> None:
        if not isinstance(op, int) or isinstance(op, bool) or not 0 <= op < num_ops:
            raise ValueError(f"{what}: op index {op!r} outside [0, {num_ops})")

    unknown = (set(producers) | set(consumers)) - set(sizes)
    if unknown:
        raise ValueError(f"producers/consumers mention tensors without a size: {sorted(unknown)}")
    records = []
    for tensor, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"tensor {tensor}: size must be a non-negative int, got {size!r}")
        if tensor not in producers:
            raise ValueError(f"tensor {tensor} has no producer; only intermediate tensors can be planned")
        first = producers[tensor]
        check_op(first, f"producer of tensor {tensor}")
        last = first
        for op in consumers.get(tensor, ()):
            check_op(op, f"consumer of tensor {tensor}")
            if op <= first:
                raise ValueError(f"tensor {tensor} is read by op {op} but only written by op {first}")
            last = max(last, op)
        records.append(UsageRecord(tensor=tensor, size=size, first=first, last=last))
    records.sort(key=lambda r: (r.first, r.tensor))
    return records
