"""Compaction through the services: trigger it on the compactor (and wait for it), list the catalog's plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lsmlake.client.connection import Connection
from lsmlake.client.tables import table_ident
from lsmlake.errors import InvalidInputError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, compactor_pb2


@dataclass(frozen=True)
class BucketCompaction:
    """A bucket a waited compaction compacted: by plan `plan_id` in COMPACT snapshot `snapshot_id`, or, with
    `plan_id` None, found already compact in snapshot `snapshot_id`."""

    partition: Mapping[str, str]  # partition values as text by column (the form `compact(partition=...)` takes)
    bucket: int
    plan_id: str | None
    snapshot_id: int


@dataclass(frozen=True)
class NotCompacted:
    """A bucket a compaction did not compact, and why (owned by another compactor, plan failed, timed out)."""

    partition: Mapping[str, str]
    bucket: int
    reason: str


@dataclass(frozen=True)
class CompactResult:
    """What a compaction trigger did: buckets queued here or owned elsewhere, and (when waited for) the outcome
    of each bucket.

    `request_snapshot_id` is the table's latest snapshot when the trigger arrived; its buckets are the ones
    named. A waited full compaction lists a bucket in `compacted` only once every file it held in that
    snapshot is rewritten into one sorted run on the highest level (level-0 files committed later may sit
    beside it); every other named bucket is in `not_compacted` with the reason. `wait_limit_s` is how long
    the compactor was prepared to wait (the call's deadline less a margin); `timed_out` says it was reached.
    """

    buckets_queued: int
    buckets_elsewhere: int
    plan_ids: tuple[str, ...]
    snapshot_ids: tuple[int, ...]
    request_snapshot_id: int = 0
    compacted: tuple[BucketCompaction, ...] = ()
    not_compacted: tuple[NotCompacted, ...] = ()
    wait_limit_s: float | None = None
    timed_out: bool = False

    @property
    def complete(self) -> bool:
        """Whether every named bucket was compacted (meaningful for a waited compaction)."""
        return not self.not_compacted


@dataclass(frozen=True)
class CompactionPlanInfo:
    """One compaction plan on a table's timeline."""

    plan_id: str
    state: str  # REQUESTED, INFLIGHT, COMPLETED, ROLLED_BACK, ABANDONED
    full: bool
    buckets: int
    base_snapshot_id: int
    committed_snapshot_id: int | None
    owner: str
    attempts: int
    reason: str
    requested_at_ms: int
    finished_at_ms: int

    @staticmethod
    def from_proto(p: catalog_pb2.CompactionPlan) -> CompactionPlanInfo:
        return CompactionPlanInfo(
            p.plan_id, catalog_pb2.CompactionPlanState.Name(p.state).removeprefix("COMPACTION_PLAN_STATE_"),
            p.full, len(p.units), p.base_snapshot_id,
            p.committed_snapshot_id if p.HasField("committed_snapshot_id") else None,
            p.owner, p.attempts, p.reason, p.requested_at_ms, p.finished_at_ms)



class Compaction:
    """Compaction on demand and the compaction timeline (a part of `Client`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def compact(self, identifier: str, full: bool = False, wait: bool = True, *,
                partition: Mapping[str, Any] | None = None, bucket: int | None = None,
                timeout_s: float | None = None) -> CompactResult:
        """Ask the compactor service to compact the table (or one partition / bucket) now.

        With `wait`, returns once every named bucket the compactor owns is compacted or known not to be:
        for a full compaction, every file a bucket held when the request arrived is then rewritten into one
        sorted run (see `CompactResult`). The wait is bounded by the call's deadline, `timeout_s` (default:
        the client's `timeout_s`): the compactor answers a margin (2 s, or 10% of a shorter deadline) before
        it, listing the unfinished buckets as timed out. Buckets another compactor replica owns are counted
        (`buckets_elsewhere`) and listed in `not_compacted`; trigger them there.
        """
        stub = self._conn.compactor_stub()
        req = compactor_pb2.TriggerCompactionRequest(
            table=table_ident(identifier), partition={k: str(v) for k, v in (partition or {}).items()}, full=full,
            wait=wait)
        if bucket is not None:
            req.bucket = bucket
        reply = self._conn.call(stub.TriggerCompaction, req, timeout_s, changes_state=True)
        return CompactResult(
            reply.buckets_queued, reply.buckets_elsewhere, tuple(reply.plan_ids), tuple(reply.snapshot_ids),
            reply.request_snapshot_id,
            tuple(BucketCompaction(dict(c.partition_values), c.bucket, c.plan_id or None, c.snapshot_id)
                  for c in reply.compacted),
            tuple(NotCompacted(dict(n.partition_values), n.bucket, n.reason) for n in reply.not_compacted),
            reply.wait_limit_ms / 1000 if wait and reply.buckets_queued else None, reply.timed_out)

    def timeline(self, identifier: str, states: Sequence[str] = ()) -> list[CompactionPlanInfo]:
        """The table's compaction plans, oldest first; `states` (e.g. "INFLIGHT") keeps only those."""
        try:
            wanted = [catalog_pb2.CompactionPlanState.Value(f"COMPACTION_PLAN_STATE_{s.upper()}") for s in states]
        except ValueError:
            raise InvalidInputError(f"states {list(states)}: use REQUESTED, INFLIGHT, COMPLETED, ROLLED_BACK "
                                    "or ABANDONED") from None
        req = catalog_pb2.ListCompactionPlansRequest(table=table_ident(identifier), states=wanted)
        reply = self._conn.call(self._conn.catalog.ListCompactionPlans, req, changes_state=False)
        return [CompactionPlanInfo.from_proto(p) for p in reply.plans]
