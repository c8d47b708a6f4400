"""The outbox events of a committed snapshot: one Envelope per (partition, bucket) it changed.

Events are keyed by table, partition and bucket so that all events of a bucket stay in order on one
Kafka partition; a snapshot that changed no bucket (an OVERWRITE emptying the table) yields one event
keyed by the table only, so every snapshot has at least one event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lsmlake.proto_gen.lsmlake.v1 import common_pb2, events_pb2

DATA_FILES_TOPIC = "data-files"
COMPACTION_RESULTS_TOPIC = "compaction-results"
TOPICS = (DATA_FILES_TOPIC, COMPACTION_RESULTS_TOPIC)


@dataclass(frozen=True)
class PendingEvent:
    """One event to record in the outbox."""

    topic: str
    key: bytes
    payload: bytes


def event_key(table_id: str, partition: bytes | None = None, bucket: int | None = None) -> bytes:
    """`db.table` or `db.table/<partition hex>/<bucket>`."""
    if partition is None or bucket is None:
        return table_id.encode()
    return f"{table_id}/{partition.hex()}/{bucket}".encode()


def snapshot_events(table_id: str, ident: common_pb2.TableIdentifier,
                    kind: common_pb2.CommitKind.ValueType, snapshot_id: int,
                    commit_time_ms: int, changes: Sequence[common_pb2.FileChanges],
                    plan_id: str = "") -> list[PendingEvent]:
    """The events of one snapshot made from `changes` (the FileChanges of the commit request).

    `plan_id` names the timeline plan a COMPACT snapshot completed, if any.
    """
    compact = kind == common_pb2.COMMIT_KIND_COMPACT
    topic = COMPACTION_RESULTS_TOPIC if compact else DATA_FILES_TOPIC
    out = []
    for c in changes or [common_pb2.FileChanges()]:
        key = event_key(table_id, c.partition, c.bucket) if changes else event_key(table_id)
        if compact:
            env = events_pb2.Envelope(compaction_result=events_pb2.CompactionResultEvent(
                table=ident, snapshot_id=snapshot_id, commit_kind=kind, partition=c.partition, bucket=c.bucket,
                total_buckets=c.total_buckets, commit_time_millis=commit_time_ms, plan_id=plan_id,
                before=c.deleted_files, after=c.new_files, changelog_files=c.changelog_files))
        else:
            env = events_pb2.Envelope(data_files=events_pb2.DataFilesEvent(
                table=ident, snapshot_id=snapshot_id, commit_kind=kind, partition=c.partition, bucket=c.bucket,
                total_buckets=c.total_buckets, commit_time_millis=commit_time_ms,
                new_files=c.new_files, deleted_files=c.deleted_files, changelog_files=c.changelog_files))
        out.append(PendingEvent(topic, key, env.SerializeToString()))
    return out
