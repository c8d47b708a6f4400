"""Which table's dirty buckets a planning round takes first, when many tables share one compactor.

Order: a table whose writers stall (a bucket at `num-sorted-run.stop-trigger`) first; then the higher
`lsmlake.compaction.priority`; then the table that has been served least for its share
(`lsmlake.compaction.share`): each plan charges the table its input bytes divided by its share, so over
time tables get compaction work in proportion to their shares (weighted fair queueing). A table that was
idle starts level with the least-served waiting table, so idleness banks no credit. A round stops taking
tables once its time budget is spent; the rest keep their place in the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    """A table with dirty buckets in a planning round."""

    table: str
    priority: int = 0
    share: int = 1
    stalled: bool = False


class FairQueue:
    """Remembers how much each table was served (bytes / share) and orders a round's tables (see the module)."""

    def __init__(self) -> None:
        self._served: dict[str, float] = {}

    def order(self, demands: Sequence[Demand]) -> list[Demand]:
        waiting = [self._served[d.table] for d in demands if d.table in self._served]
        floor = min(waiting, default=0.0)
        for d in demands:
            self._served[d.table] = max(self._served.get(d.table, floor), floor)
        return sorted(demands, key=lambda d: (not d.stalled, -d.priority, self._served[d.table], d.table))

    def charge(self, demand: Demand, input_bytes: int) -> None:
        """A plan of `input_bytes` ran for the table."""
        self._served[demand.table] = self._served.get(demand.table, 0.0) + input_bytes / max(1, demand.share)

    def served(self, table: str) -> float:
        return self._served.get(table, 0.0)

    def forget(self, table: str) -> None:
        self._served.pop(table, None)
