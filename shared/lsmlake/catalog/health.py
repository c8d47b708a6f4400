"""How far behind compaction is, per table and bucket, and a health score to rank tables by.

Read from a table's latest snapshot and its pending compaction plans, nothing else. Every figure points at work
compaction would do now (`lsmlake.catalog.health_bucket` says when a bucket is due and which files are small):
- **lag**: how long the compaction now due has waited, the largest of the buckets'; a bucket that compaction
  would leave alone (`lake compact`: "nothing to compact") has none, however old its data;
- primary-key tables: sorted runs against `num-sorted-run.compaction-trigger` (where a pick is forced) and the
  stop trigger (where writers stall); append tables: small files against `compaction.min.file-num` and
  `compaction.max.file-num` (they have no sorted runs and never stall);
- small files, the share of rows deletion vectors mark deleted;
- pending (REQUESTED) and running (INFLIGHT) plans, and the age of the oldest.

The score, its bands and its reasons: `lsmlake.catalog.health_score`. A primary-key table with a bucket past its
stop trigger is `stalled` (its writers wait) and ranks first, after the tables that could not be read at all.

A table with a feature lsmlake does not maintain (`lsmlake.table.features`: a primary-key index, row tracking,
BLOB columns, ...) is never compacted by lsmlake: its health keeps the figures (when they can be read; nothing is
due) and says why as its `error`, so it ranks with the unreadable tables, in front of an operator.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.health_bucket import BucketHealth, DueRules, bucket_health
from lsmlake.catalog.health_score import (
    DELETED_FULL_PENALTY,
    LAG_FULL_PENALTY_MS,
    REASON_FROM_POINTS,
    Reason,
    band,
    penalties,
    ramp,
    score_of,
)
from lsmlake.errors import NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.snapshot import Snapshot
from lsmlake.mergetree.levels import writers_stall
from lsmlake.metastore import PENDING_STATES, CompactionPlan, MetaStore
from lsmlake.table import features
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket
from lsmlake.table.scan import Split

__all__ = ["BucketHealth", "TableHealth", "health_of", "ranked", "read_health", "read_healths", "table_health"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableHealth:
    """A table's compaction state and its score (see the module)."""

    table: str
    snapshot_id: int
    stop_trigger: int  # primary-key tables' num-sorted-run.stop-trigger; 0 for append tables, which have none
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
    compaction_trigger: int = 0  # primary-key tables' num-sorted-run.compaction-trigger
    min_file_num: int = 0  # append tables' compaction.min.file-num
    max_file_num: int = 0  # append tables' compaction.max.file-num

    @staticmethod
    def unreadable(table: str, error: str, now_ms: int) -> TableHealth:
        return TableHealth(table, 0, 0, (), 0, 0, None, now_ms, error=error)

    @property
    def lag_ms(self) -> int:
        return max((b.lag_ms(self.now_ms) for b in self.buckets), default=0)

    @property
    def due_buckets(self) -> int:
        """Buckets with a compaction due (postponed rows included)."""
        return sum(b.due for b in self.buckets)

    @property
    def max_sorted_runs(self) -> int:
        return max((b.sorted_runs for b in self.buckets if b.bucket != POSTPONE_BUCKET), default=0)

    @property
    def max_small_files(self) -> int:
        """Small files of the worst bucket (for append tables, against min.file-num and max.file-num)."""
        return max((b.small_files for b in self.buckets if b.bucket != POSTPONE_BUCKET), default=0)

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
        return 0 if self.error is not None else score_of(self.penalties, self.stalled)

    @property
    def severity(self) -> str:
        """The score's band for a UI to colour: `good` (>= 80), `warning` (50..79), `bad` (< 50, stalled, or an
        error)."""
        return band(self.score, self.stalled, self.error)

    @property
    def reasons(self) -> tuple[Reason, ...]:
        """Why the table lost points, in a fixed order: error, stalled, then each penalty of a point or more."""
        out: list[Reason] = []
        if self.error is not None:
            out.append(Reason("error", self.error))
        if self.stalled:
            out.append(Reason("stalled", f"{self.max_sorted_runs} sorted runs in a bucket, past "
                                         f"num-sorted-run.stop-trigger {self.stop_trigger}: writers wait"))
        p = {k: v for k, v in self.penalties.items() if v >= REASON_FROM_POINTS}
        if "runs" in p and not self.stalled:
            out.append(Reason("runs", f"{self.max_sorted_runs} sorted runs in the worst bucket (compaction-trigger "
                                      f"{self.compaction_trigger}, stop-trigger {self.stop_trigger})"))
        if "files" in p:
            out.append(Reason("files", f"{self.max_small_files} small files in the worst bucket (compaction.min."
                                       f"file-num {self.min_file_num}, compaction.max.file-num {self.max_file_num})"))
        if "lag" in p:
            out.append(Reason("lag", f"a due compaction has waited {self.lag_ms / 1000:.0f} s "
                                     f"({self.due_buckets} of {len(self.buckets)} buckets due)"))
        if "small_files" in p:
            out.append(Reason("small_files", f"{sum(b.small_files for b in self.buckets)} of "
                                             f"{sum(b.files for b in self.buckets)} files are small"))
        if "deleted" in p:
            rows = sum(b.rows for b in self.buckets)
            out.append(Reason("deleted", f"{sum(b.deleted_rows for b in self.buckets) / rows:.0%} of the rows "
                                         "are marked deleted"))
        return tuple(out)


def table_health(table: FileStoreTable, plans: Sequence[CompactionPlan], now_ms: int,
                 at: tuple[Snapshot | None, Sequence[Split]] | None = None) -> TableHealth:
    """The health of a table with its pending plans (REQUESTED or INFLIGHT): at its latest snapshot, or at `at`
    (a snapshot and its `every_bucket` splits, for a caller that has read them already)."""
    refused = features.refusal(table.schema, table.identifier, for_write=True, compaction=True)
    try:
        snap, splits = at if at is not None else _latest(table)
    except Exception:
        if refused is None:
            raise
        # what lsmlake does not compact it may not read either (BLOB columns): the refusal says more than that
        return TableHealth.unreadable(table.identifier, refused, now_ms)
    o = table.options
    pk = table.schema.is_primary_key_table
    # a refused table is never planned (a plan reads options the table may not have right)
    rules = DueRules.of(table, snap.time_millis if snap else None, now_ms, planned=refused is None)
    buckets = tuple(bucket_health(table, s, rules) for s in splits)
    pending = [p for p in plans if p.pending]
    trigger = o.require(opts.NUM_SORTED_RUN_COMPACTION_TRIGGER)
    min_num, max_num = o.require(opts.COMPACTION_MIN_FILE_NUM), o.require(opts.COMPACTION_MAX_FILE_NUM)
    health = TableHealth(table.identifier, snap.id if snap else 0, o.stop_trigger() if pk else 0, buckets,
                         sum(p.state == "REQUESTED" for p in pending), sum(p.state == "INFLIGHT" for p in pending),
                         min((p.created_ms for p in pending), default=None), now_ms, pk,
                         tuple(table.schema.types_of(table.schema.partition_keys)), error=refused,
                         compaction_trigger=trigger if pk else 0, min_file_num=0 if pk else min_num,
                         max_file_num=0 if pk else max_num)
    files = sum(b.files for b in buckets)
    rows = sum(b.rows for b in buckets)
    # deleted rows cost from Paimon's ratio at which an append file is rewritten: below it they are the normal
    # state of a table with deletion vectors that takes updates
    start = o.require(opts.COMPACTION_DELETE_RATIO_THRESHOLD)
    deleted = sum(b.deleted_rows for b in buckets) / rows if rows else 0.0
    shares = {"lag": health.lag_ms / LAG_FULL_PENALTY_MS,
              "deleted": ramp(deleted, start, max(DELETED_FULL_PENALTY, 2 * start))}
    if pk:
        # a stop trigger set below the compaction trigger still stalls writers past it
        shares["runs"] = ramp(health.max_sorted_runs, min(trigger, health.stop_trigger), health.stop_trigger)
        shares["small_files"] = sum(b.small_files for b in buckets) / files if files else 0.0
    else:  # from min.file-num small files a compaction may be due; at max.file-num it is forced
        shares["files"] = ramp(health.max_small_files, min_num - 1, max_num)
    health.penalties.update(penalties(shares))
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
    """Unreadable tables first, then stalled ones, then by score (worst first), then by lag; among equals, the
    one nearer a compaction (more sorted runs, more small files, more level-0 files) first."""
    return sorted(healths, key=lambda h: (h.error is None, not h.stalled, h.score, -h.lag_ms, -h.max_sorted_runs,
                                          -h.max_small_files, -h.level0_files, h.table))
