"""The result of memory planning: objects (GPU buffers) and where each tensor lives in them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .records import UsageRecord, check_records

__all__ = ["MemoryPlan"]


@dataclass
class MemoryPlan:
    """Objects to allocate and the ``(object index, byte offset)`` of every tensor.

    Shared-object strategies (naive, greedy, mincostflow) place every tensor at offset 0 of its own
    object; the offsets strategy uses a single object, the arena, and places tensors at offsets in it.
    ``strategy`` names the algorithm that made the plan; for ``best`` it reads ``"best(<winner>)"``.
    """

    strategy: str
    object_sizes: list[int] = field(default_factory=list)
    placement: dict[int, tuple[int, int]] = field(default_factory=dict)
    optimal: bool = False  # proven the least memory any plan of its kind can take (exact offsets planner)

    @property
    def total_bytes(self) -> int:
        """Bytes the runtime has to allocate for this plan."""
        return sum(self.object_sizes)

    @property
    def num_objects(self) -> int:
        return len(self.object_sizes)

    @property
    def requested_strategy(self) -> str:
        """The name passed to ``plan_memory`` (``"best"`` for ``"best(greedy)"``)."""
        return self.strategy.split("(", 1)[0]

    @property
    def chosen_strategy(self) -> str:
        """The algorithm that actually produced the placement (``"greedy"`` for ``"best(greedy)"``)."""
        if "(" in self.strategy and self.strategy.endswith(")"):
            return self.strategy[self.strategy.index("(") + 1 : -1]
        return self.strategy

    def validate(self, records: Iterable[UsageRecord]) -> None:
        """Raise if the plan is unusable for ``records``.

        Checks that every tensor is placed inside its object and that no two tensors whose lifetimes
        overlap share a byte.  Sweep over records by first step, keeping per object only the tensors still
        live, so it stays near-linear for the common case of few simultaneously live tensors.
        """
        recs = check_records(records)
        for i, size in enumerate(self.object_sizes):
            if size < 0:
                raise ValueError(f"object {i} has negative size {size}")
        for r in recs:
            if r.tensor not in self.placement:
                raise ValueError(f"tensor {r.tensor} has no placement")
            obj, off = self.placement[r.tensor]
            if not 0 <= obj < len(self.object_sizes):
                raise ValueError(f"tensor {r.tensor} placed in missing object {obj}")
            if off < 0 or off + r.size > self.object_sizes[obj]:
                raise AssertionError(
                    f"tensor {r.tensor} ({r.size} B at offset {off}) does not fit object {obj} "
                    f"({self.object_sizes[obj]} B)"
                )
        live: dict[int, list[UsageRecord]] = {}
        for r in sorted(recs, key=lambda r: (r.first, r.tensor)):
            obj, off = self.placement[r.tensor]
            still = [o for o in live.get(obj, []) if o.last >= r.first]
            for o in still:  # every o here overlaps r in time
                o_off = self.placement[o.tensor][1]
                if off < o_off + o.size and o_off < off + r.size:
                    raise AssertionError(
                        f"tensors {o.tensor} [{o.first},{o.last}] and {r.tensor} [{r.first},{r.last}] are "
                        f"live together but overlap in object {obj}: bytes [{o_off},{o_off + o.size}) "
                        f"and [{off},{off + r.size})"
                    )
            still.append(r)
            live[obj] = still
