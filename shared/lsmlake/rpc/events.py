"""The outbox events of a committed snapshot: one Envelope per (partition, bucket) it changed.

Events are keyed by table, partition and bucket so that all events of a bucket stay in order on one
Kafka partition; a snapshot that changed no bucket (an OVERWRITE emptying the table) yields one event
keyed by the table only, so every snapshot has at least one event. `snapshot_events` is the
`EventEncoder` the catalog's commits and reconciliation are given (see `lsmlake.catalog.snapshot_events`).
"""

from __future__ import annotations

from lsmlake.catalog.filesystem import split_identifier
from lsmlake.catalog.snapshot_events import EventMessage, SnapshotEvent
from lsmlake.proto_gen.lsmlake.v1 import common_pb2, events_pb2
from lsmlake.rpc.convert import KIND_TO_PROTO, changes_to_proto

DATA_FILES_TOPIC = "data-files"
COMPACTION_RESULTS_TOPIC = "compaction-results"
TOPICS = (DATA_FILES_TOPIC, COMPACTION_RESULTS_TOPIC)


def event_key(table_id: str, partition: bytes | None = None, bucket: int | None = None) -> bytes:
    """`db.table` or `db.table/<partition hex>/<bucket>`."""
    if partition is None or bucket is None:
        return table_id.encode()
    return f"{table_id}/{partition.hex()}/{bucket}".encode()


def snapshot_events(event: SnapshotEvent) -> list[EventMessage]:
    """The outbox rows of one snapshot: an Envelope per changed (partition, bucket), or one for the table."""
    db, name = split_identifier(event.table_id)
    ident = common_pb2.TableIdentifier(database=db, table=name)
    kind = KIND_TO_PROTO[event.kind]
    compact = kind == common_pb2.COMMIT_KIND_COMPACT
    topic = COMPACTION_RESULTS_TOPIC if compact else DATA_FILES_TOPIC
    changes = [changes_to_proto(m) for m in event.changes]
    out = []
    for c in changes or [common_pb2.FileChanges()]:
        key = event_key(event.table_id, c.partition, c.bucket) if changes else event_key(event.table_id)
        if compact:
            env = events_pb2.Envelope(compaction_result=events_pb2.CompactionResultEvent(
                table=ident, snapshot_id=event.snapshot_id, commit_kind=kind, partition=c.partition,
                bucket=c.bucket, total_buckets=c.total_buckets, commit_time_millis=event.commit_time_ms,
                plan_id=event.plan_id, before=c.deleted_files, after=c.new_files, changelog_files=c.changelog_files))
        else:
            env = events_pb2.Envelope(data_files=events_pb2.DataFilesEvent(
                table=ident, snapshot_id=event.snapshot_id, commit_kind=kind, partition=c.partition,
                bucket=c.bucket, total_buckets=c.total_buckets, commit_time_millis=event.commit_time_ms,
                new_files=c.new_files, deleted_files=c.deleted_files, changelog_files=c.changelog_files))
        out.append(EventMessage(topic, key, env.SerializeToString()))
    return out
