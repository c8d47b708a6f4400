"""How far behind compaction is, per table and bucket, and a health score to rank tables by.

Read from a table's latest snapshot and its pending compaction plans, nothing else:
- **lag**: the age of the oldest file not yet compacted: a level-0 file (rows that deletion-vector and lookup
  readers do not see yet, and that every merge-on-read must merge), or a postponed file waiting to be placed; in
  an append table (whose files all stay on level 0) the oldest file that compaction is due to rewrite now;
- sorted runs (against the stop trigger, where writers stall), level-0 files, small files, the share of rows
  deletion vectors mark deleted;
- pending (REQUESTED) and running (INFLIGHT) plans, and the age of the oldest.

The score (0 worst, 100 best) subtracts, each capped at its weight:
- 40 x (most sorted runs of a bucket / the stop trigger),
- 25 x (lag / 30 minutes),
- 20 x (share of the table's files that are small, once a bucket has more than one file),
- 15 x (deleted share of the rows / 50%).
A primary-key table with a bucket past its stop trigger is `stalled` (its writers wait) and ranks first, after
the tables that could not be read at all.

A table with a feature lsmlake does not maintain (`lsmlake.table.features`: a primary-key index, row tracking,
BLOB columns, ...) is never compacted by lsmlake: its health keeps the figures (when they can be read) and says
why as its `error`, so it ranks with the unreadable tables, in front of an operator.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import NotFoundError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.snapshot import Snapshot
from lsmlake.mergetree.levels import writers_stall
from lsmlake.metastore import PENDING_STATES, CompactionPlan, MetaStore
from lsmlake.table import features
from lsmlake.table.compact import plan_bucket
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket
from lsmlake.table.scan import Split

LAG_FULL_PENALTY_MS = 30 * 60_000
DELETED_FULL_PENALTY = 0.5
WEIGHTS = {"runs": 40.0, "lag": 25.0, "small_files": 20.0, "deleted": 15.0}

_log = logging.getLogger(__name__)


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
    oldest_uncompacted_ms: int | None  # creation time of the oldest file not yet compacted (see the module)

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
    primary_key: bool = True
    partition_types: tuple[Any, ...] = ()  # of the partition keys, to show `partition_values` as text
    penalties: dict[str, float] = field(default_factory=dict)
    # why the table could not be read (the figures are then empty), or why lsmlake does not compact it (the
    # figures are kept); the score is then 0
    error: str | None = None

    @staticmethod
    def unreadable(table: str, error: str, now_ms: int) -> TableHealth:
        return TableHealth(table, 0, 0, (), 0, 0, None, now_ms, error=error)

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
        """Writers of a bucket wait for compaction (append tables never stall)."""
        return self.primary_key and self.error is None and writers_stall(self.max_sorted_runs, self.stop_trigger)

    @property
    def oldest_plan_age_ms(self) -> int:
        return 0 if self.oldest_plan_created_ms is None else max(0, self.now_ms - self.oldest_plan_created_ms)

    @property
    def score(self) -> int:
        return 0 if self.error is not None else round(100 - sum(self.penalties.values()))


def bucket_health(table: FileStoreTable, split: Split, plan: bool = True) -> BucketHealth:
    """A bucket's figures from its files (all levels) and its deletion vectors' cardinalities; without `plan`, an
    append bucket's lag counts from its oldest file (what compaction would rewrite is not asked)."""
    files = split.files
    level0 = [f for f in files if f.level == 0 or split.bucket == POSTPONE_BUCKET]
    if table.schema.is_primary_key_table or split.bucket == POSTPONE_BUCKET or not plan:
        waiting = level0
    else:  # every append file is on level 0, compacted or not: only those compaction would rewrite now wait
        unit = plan_bucket(table, split)
        waiting = list(unit.files) if unit is not None else []
    runs = len(level0) + len({f.level for f in files if f.level > 0})
    small_size = table.options.compaction_file_size(table.schema.is_primary_key_table)
    small = sum(1 for f in files if f.file_size < small_size) if len(files) > 1 else 0
    dv = getattr(split, "dv_index", None)
    deleted = sum(r.cardinality or 0 for r in (dv.dv_ranges or ())) if dv is not None else 0
    times = [f.creation_time_ms for f in waiting if f.creation_time_ms is not None]
    return BucketHealth(split.partition, tuple(split.partition_values), split.bucket, runs, len(level0), len(files),
                        small, sum(f.file_size for f in files), sum(f.row_count for f in files), deleted,
                        min(times) if times else None)


def table_health(table: FileStoreTable, plans: Sequence[CompactionPlan], now_ms: int,
                 at: tuple[Snapshot | None, Sequence[Split]] | None = None) -> TableHealth:
    """The health of a table with its pending plans (REQUESTED or INFLIGHT): at its latest snapshot, or at `at`
    (a snapshot and its `every_bucket` splits, for a caller that has read them already)."""
    refused = features.refusal(table.schema, table.identifier, for_write=True, compaction=True)
    snap, splits = at if at is not None else _latest(table)
    # a refused table's append buckets are not planned (a plan reads options the table may not have right)
    buckets = tuple(bucket_health(table, s, plan=refused is None) for s in splits)
    pending = [p for p in plans if p.pending]
    health = TableHealth(table.identifier, snap.id if snap else 0, table.options.stop_trigger(), buckets,
                         sum(p.state == "REQUESTED" for p in pending), sum(p.state == "INFLIGHT" for p in pending),
                         min((p.created_ms for p in pending), default=None), now_ms,
                         table.schema.is_primary_key_table,
                         tuple(table.schema.types_of(table.schema.partition_keys)), error=refused)
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
    return table_health(table, store.plans.list_plans(table.identifier, PENDING_STATES), now_ms, at)


def read_health(catalog: FileSystemCatalog, store: MetaStore | None, table_id: str,
                now_ms: int) -> TableHealth | None:
    """The table's health with its pending plans from `store` (None: no plans known); None when the table does
    not exist (dropped meanwhile), and an `unreadable` health when it cannot be read (a missing or corrupt
    manifest, say): such a table needs an operator more than any other."""
    try:
        table = catalog.get_table(table_id)
    except NotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 (its schema cannot be read)
        return _unreadable(table_id, e, now_ms)
    try:  # from here a file not found is a broken table, not a dropped one
        return table_health(table, [], now_ms) if store is None else health_of(table, store, now_ms)
    except Exception as e:  # noqa: BLE001 (any failure to read the table is what this reports)
        return _unreadable(table_id, e, now_ms)


def read_healths(catalog: FileSystemCatalog, store: MetaStore | None, table_ids: Sequence[str],
                 now_ms: int) -> list[TableHealth]:
    """`read_health` of each table, `ranked`; tables dropped meanwhile are left out."""
    return ranked([h for h in (read_health(catalog, store, t, now_ms) for t in table_ids) if h is not None])


def _unreadable(table_id: str, e: Exception, now_ms: int) -> TableHealth:
    _log.warning("cannot compute the health of %s: %s: %s", table_id, type(e).__name__, e)
    return TableHealth.unreadable(table_id, f"{type(e).__name__}: {e}"[:500], now_ms)


def _latest(table: FileStoreTable) -> tuple[Snapshot | None, list[Split]]:
    snap = table.latest_snapshot()
    if snap is not None:
        # manifests are read from the process's cache of decoded ones when they were read before: a list deleted
        # since (a broken table) is looked for, so that the table is reported unreadable
        for name in (snap.base_manifest_list, snap.delta_manifest_list):
            if not table.io.exists(table.manifests.path(name)):
                raise NotFoundError(f"manifest list {name} of snapshot {snap.id} of {table.identifier} not found")
    return snap, every_bucket(table, snap)


def ranked(healths: Sequence[TableHealth]) -> list[TableHealth]:
    """Unreadable tables first, then stalled ones, then by score (worst first), then by lag."""
    return sorted(healths, key=lambda h: (h.error is None, not h.stalled, h.score, -h.lag_ms, h.table))
