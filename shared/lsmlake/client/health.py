"""Compaction health through the catalog: tables ranked by how far compaction is behind (`ListTableHealth`).

The catalog computes the figures (`lsmlake.catalog.health`) from each table's latest snapshot and its pending
plans; the client returns them as plain values. They are not rebuilt into `lsmlake.catalog.health.TableHealth`:
that type derives the table's figures from every bucket's, which the catalog sends only on request, and holds
typed partition values where the wire has their directory text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lsmlake.client.connection import Connection
from lsmlake.client.tables import table_ident
from lsmlake.errors import InvalidInputError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2


@dataclass(frozen=True)
class BucketHealthInfo:
    """One bucket at the table's latest snapshot."""

    partition_values: tuple[str | None, ...]  # directory text, in the order of the partition keys; None: null
    bucket: int  # -2: a postpone table's rows waiting to be placed
    sorted_runs: int  # each level-0 file, and each non-empty higher level (primary-key tables; append: 0)
    level0_files: int
    files: int
    small_files: int  # files compaction would not leave (docs/operating-tables.md)
    size_bytes: int
    rows: int  # deleted ones included
    deleted_rows: int  # marked by the bucket's deletion vectors
    lag_ms: int  # how long the compaction now due has waited (docs/operating-tables.md); 0: nothing due
    due: bool = False  # a compaction of this bucket is due (what `lake compact` would compact now)

    @staticmethod
    def from_proto(p: catalog_pb2.BucketHealth) -> BucketHealthInfo:
        # the catalog sends a null partition value as "", which Paimon's directories cannot hold either
        return BucketHealthInfo(tuple(v or None for v in p.partition_values), p.bucket, p.sorted_runs,
                                p.level0_files, p.files, p.small_files, p.size_bytes, p.rows, p.deleted_rows,
                                p.lag_ms, p.due)


@dataclass(frozen=True)
class TableHealthInfo:
    """A table's compaction state and health score (0 worst, 100 best; docs/operating-tables.md)."""

    identifier: str
    score: int
    stalled: bool  # a bucket of a primary-key table is past num-sorted-run.stop-trigger: its writers wait
    lag_ms: int  # the largest lag of a bucket: how long a due compaction has waited
    max_sorted_runs: int  # sorted runs of the worst bucket (0 for append tables)
    stop_trigger: int  # num-sorted-run.stop-trigger (0 for append tables, which have none)
    level0_files: int  # level-0 (and postponed) files of all buckets
    pending_plans: int  # compaction plans REQUESTED
    inflight_plans: int  # compaction plans INFLIGHT
    oldest_plan_age_ms: int  # of the oldest REQUESTED or INFLIGHT plan; 0: none
    snapshot_id: int  # the snapshot the figures are of; 0: the table has none
    # what the score lost: runs, lag, small_files, deleted (primary-key tables); files, lag, deleted (append)
    penalties: Mapping[str, float] = field(default_factory=dict)
    buckets: tuple[BucketHealthInfo, ...] = ()  # with `with_buckets` only
    error: str | None = None  # the table could not be read: why (the figures are empty, the score 0)
    severity: str = "good"  # the score's band: `good` (>= 80), `warning` (50..79), `bad` (< 50, stalled, or error)
    reasons: tuple[str, ...] = ()  # why it lost points, each "cause: sentence" (error, stalled, then penalties)
    due_buckets: int = 0  # buckets with a compaction due
    compaction_trigger: int = 0  # num-sorted-run.compaction-trigger (primary-key tables)
    max_small_files: int = 0  # small files of the worst bucket
    min_file_num: int = 0  # compaction.min.file-num (append tables)
    max_file_num: int = 0  # compaction.max.file-num (append tables)
    primary_key: bool = True  # else an append table, measured by its small files

    @staticmethod
    def from_proto(p: catalog_pb2.TableHealth) -> TableHealthInfo:
        return TableHealthInfo(f"{p.table.database}.{p.table.table}", p.score, p.stalled, p.lag_ms, p.max_sorted_runs,
                               p.stop_trigger, p.level0_files, p.pending_plans, p.inflight_plans,
                               p.oldest_plan_age_ms, p.snapshot_id, dict(p.penalties),
                               tuple(BucketHealthInfo.from_proto(b) for b in p.buckets), p.error or None,
                               p.severity, tuple(f"{r.cause}: {r.detail}" for r in p.reasons), p.due_buckets,
                               p.compaction_trigger, p.max_small_files, p.min_file_num, p.max_file_num,
                               p.primary_key)


class Health:
    """The compaction health of tables (a part of `Client`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def list_table_health(self, identifier: str | None = None, *, database: str | None = None,
                          with_buckets: bool = False) -> list[TableHealthInfo]:
        """The health of one table (`identifier`), of the tables of `database`, or of every table, ranked as the
        catalog ranks them: tables that cannot be read first (with their `error`), then stalled ones, then the
        lowest score, then the largest lag. `with_buckets` adds every bucket's figures. An unknown table or
        database raises NotFoundError."""
        if identifier is not None and database is not None:
            raise InvalidInputError("list_table_health takes one table or one database, not both")
        req = catalog_pb2.ListTableHealthRequest(with_buckets=with_buckets)
        if identifier is not None:
            req.table.CopyFrom(table_ident(identifier))
        elif database is not None:
            req.database = database
        reply = self._conn.call(self._conn.catalog.ListTableHealth, req, changes_state=False)
        return [TableHealthInfo.from_proto(t) for t in reply.tables]
