"""Which table's dirty buckets a planning round takes first, when many tables share one compactor.

Order: a table whose writers stall (a bucket past `num-sorted-run.stop-trigger`) first; then the higher
`lsmlake.compaction.priority`; then the table that has been served least for its share
(`lsmlake.compaction.share`). A table without its own priority or share takes its database's, given to the
compactor (`--database-priority`, `--database-share`: `DatabaseWeights`), else the defaults (0 and 1).

Service: each plan charges the table its input bytes divided by its share, so over time tables get compaction
work in proportion to their shares (weighted fair queueing). A table that was idle (not in the previous round)
starts no lower than the least-served table of that round, so idleness banks no credit; that level never goes
down. A round stops taking tables once its time budget is spent (`compactor-svc --round-budget`); the rest
keep their place in the queue. Dropped tables are forgotten at the scheduler's reconciliation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from lsmlake.format import options as opts
from lsmlake.format.options import TableOptions


@dataclass(frozen=True)
class Demand:
    """A table with dirty buckets in a planning round."""

    table: str
    priority: int = 0
    share: int = 1
    stalled: bool = False


@dataclass(frozen=True)
class DatabaseWeights:
    """The priority and share of each database's tables that set none of their own."""

    priority: Mapping[str, int] = field(default_factory=dict)
    share: Mapping[str, int] = field(default_factory=dict)

    def demand(self, table_id: str, options: TableOptions, stalled: bool) -> Demand:
        """The table's place in the queue: its own option, else its database's, else the option's default."""
        db = table_id.split(".", 1)[0]
        priority = options.require(opts.COMPACTION_PRIORITY) if opts.COMPACTION_PRIORITY.key in options.raw \
            else self.priority.get(db, opts.COMPACTION_PRIORITY.default)
        share = options.require(opts.COMPACTION_SHARE) if opts.COMPACTION_SHARE.key in options.raw \
            else self.share.get(db, opts.COMPACTION_SHARE.default)
        return Demand(table_id, priority, share, stalled)


class FairQueue:
    """Remembers how much each table was served (bytes / share) and orders a round's tables (see the module)."""

    def __init__(self) -> None:
        self._served: dict[str, float] = {}
        # the tables of the previous round and those charged since: they waited or were served without a pause
        self._active: set[str] = set()
        # never decreases: a table that (re)appears starts here, so a low count left from before an idle spell
        # (its own or a dropped table's) cannot pull the level down and jump it ahead of the waiting tables
        self._virtual = 0.0

    def order(self, demands: Sequence[Demand]) -> list[Demand]:
        self._virtual = max(self._virtual, min((self._served[t] for t in self._active if t in self._served),
                                               default=self._virtual))
        for d in demands:
            if d.table not in self._active:
                self._served[d.table] = max(self._served.get(d.table, self._virtual), self._virtual)
        self._active = {d.table for d in demands}
        return sorted(demands, key=lambda d: (not d.stalled, -d.priority, self._served[d.table], d.table))

    def charge(self, demand: Demand, input_bytes: int) -> None:
        """A plan of `input_bytes` ran for the table."""
        self._served[demand.table] = self._served.get(demand.table, self._virtual) + input_bytes / max(1, demand.share)
        self._active.add(demand.table)

    def served(self, table: str) -> float:
        return self._served.get(table, 0.0)

    def forget(self, table: str) -> None:
        self._served.pop(table, None)
        self._active.discard(table)

    def retain(self, tables: Collection[str]) -> None:
        """Forget every table but `tables` (those that exist): a table created again under a dropped one's name
        starts afresh."""
        for t in [t for t in self._served if t not in tables]:
            self.forget(t)
