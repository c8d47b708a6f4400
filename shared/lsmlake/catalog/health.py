"""How far behind compaction is, per table and bucket, and a health score to rank tables by.

Read from a table's latest snapshot and its pending compaction plans, nothing else:
- **lag**: the age of the oldest file not yet compacted: a level-0 file (rows that deletion-vector and lookup
  readers do not see yet, and that every merge-on-read must merge), or a postponed file waiting to be placed;
- sorted runs (against the stop trigger, where writers stall), level-0 files, small files, the share of rows
  deletion vectors mark deleted;
- pending (REQUESTED) and running (INFLIGHT) plans, and the age of the oldest.

The score (0 worst, 100 best) subtracts, each capped at its weight:
- 40 x (most sorted runs of a bucket / the stop trigger),
- 25 x (lag / 30 minutes),
- 20 x (share of the table's files that are small, once a bucket has more than one file),
- 15 x (deleted share of the rows / 50%).
A table with a bucket at its stop trigger is `stalled` (its writers wait) and ranks first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.snapshot import Snapshot
from lsmlake.metastore import PENDING_STATES, CompactionPlan, MetaStore
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket
from lsmlake.table.scan import Split

LAG_FULL_PENALTY_MS = 30 * 60_000
DELETED_FULL_PENALTY = 0.5
WEIGHTS = {"runs": 40.0, "lag": 25.0, "small_files": 20.0, "deleted": 15.0}


@dataclass(frozen=True)
class BucketHealth:
    """One bucket at the latest snapshot."""

    partition: bytes
    partition_values: tuple[object, ...]
    bucket: int
    sorted_runs: int
    level0_files: int
    files: int
    small_files: int
    size_bytes: int
    rows: int
    deleted_rows: int
    oldest_uncompacted_ms: int | None  # creation time of the oldest level-0 or postponed file

    def lag_ms(self, now_ms: int) -> int:
        return 0 if self.oldest_uncompacted_ms is None else max(0, now_ms - self.oldest_uncompacted_ms)


@dataclass(frozen=True)
class TableHealth:
    """A table's compaction state and its score (see the module)."""

    table: str
    snapshot_id: int
    stop_trigger: int
    buckets: tuple[BucketHealth, ...]
    pending_plans: int
    inflight_plans: int
    oldest_plan_created_ms: int | None
    now_ms: int
    penalties: dict[str, float] = field(default_factory=dict)

    @property
    def lag_ms(self) -> int:
        return max((b.lag_ms(self.now_ms) for b in self.buckets), default=0)

    @property
    def max_sorted_runs(self) -> int:
        return max((b.sorted_runs for b in self.buckets if b.bucket != POSTPONE_BUCKET), default=0)

    @property
    def level0_files(self) -> int:
        return sum(b.level0_files for b in self.buckets)

    @property
    def stalled(self) -> bool:
        return self.max_sorted_runs >= self.stop_trigger

    @property
    def oldest_plan_age_ms(self) -> int:
        return 0 if self.oldest_plan_created_ms is None else max(0, self.now_ms - self.oldest_plan_created_ms)

    @property
    def score(self) -> int:
        return round(100 - sum(self.penalties.values()))


def bucket_health(table: FileStoreTable, split: Split) -> BucketHealth:
    """A bucket's figures from its files (all levels) and its deletion vectors' cardinalities."""
    files = split.files
    level0 = [f for f in files if f.level == 0 or split.bucket == POSTPONE_BUCKET]
    runs = len(level0) + len({f.level for f in files if f.level > 0})
    small_size = table.options.compaction_file_size(table.schema.is_primary_key_table)
    small = sum(1 for f in files if f.file_size < small_size) if len(files) > 1 else 0
    dv = getattr(split, "dv_index", None)
    deleted = sum(r.cardinality or 0 for r in (dv.dv_ranges or ())) if dv is not None else 0
    times = [f.creation_time_ms for f in level0 if f.creation_time_ms is not None]
    return BucketHealth(split.partition, tuple(split.partition_values), split.bucket, runs, len(level0), len(files),
                        small, sum(f.file_size for f in files), sum(f.row_count for f in files), deleted,
                        min(times) if times else None)


def table_health(table: FileStoreTable, plans: Sequence[CompactionPlan], now_ms: int,
                 at: tuple[Snapshot | None, Sequence[Split]] | None = None) -> TableHealth:
    """The health of a table with its pending plans (REQUESTED or INFLIGHT): at its latest snapshot, or at `at`
    (a snapshot and its `every_bucket` splits, for a caller that has read them already)."""
    snap, splits = at if at is not None else _latest(table)
    buckets = tuple(bucket_health(table, s) for s in splits)
    pending = [p for p in plans if p.pending]
    health = TableHealth(table.identifier, snap.id if snap else 0, table.options.stop_trigger(), buckets,
                         sum(p.state == "REQUESTED" for p in pending), sum(p.state == "INFLIGHT" for p in pending),
                         min((p.created_ms for p in pending), default=None), now_ms)
    files = sum(b.files for b in buckets if b.files > 1)
    rows = sum(b.rows for b in buckets)
    shares = {"runs": health.max_sorted_runs / health.stop_trigger if table.schema.is_primary_key_table else 0.0,
              "lag": health.lag_ms / LAG_FULL_PENALTY_MS,
              "small_files": sum(b.small_files for b in buckets) / files if files else 0.0,
              "deleted": (sum(b.deleted_rows for b in buckets) / rows) / DELETED_FULL_PENALTY if rows else 0.0}
    health.penalties.update({k: WEIGHTS[k] * min(1.0, v) for k, v in shares.items()})
    return health


def health_of(table: FileStoreTable, store: MetaStore, now_ms: int,
              at: tuple[Snapshot | None, Sequence[Split]] | None = None) -> TableHealth:
    """`table_health` with the table's pending plans read from the catalog's metadata store."""
    return table_health(table, store.list_plans(table.identifier, PENDING_STATES), now_ms, at)


def _latest(table: FileStoreTable) -> tuple[Snapshot | None, list[Split]]:
    snap = table.latest_snapshot()
    return snap, every_bucket(table, snap)


def ranked(healths: Sequence[TableHealth]) -> list[TableHealth]:
    """Stalled tables first, then by score (worst first), then by lag."""
    return sorted(healths, key=lambda h: (not h.stalled, h.score, -h.lag_ms, h.table))
