"""What the catalog announces of a snapshot, and how it reaches the metadata store's outbox.

A committed (or reconciled) snapshot is described as a `SnapshotEvent` of lsmlake's value types; the
wire form of its messages is the rpc layer's, so whoever runs the catalog's commits passes an
`EventEncoder` (`lsmlake.rpc.events.snapshot_events`) that turns one into the outbox rows to record.
The encoder is called inside the table's commit lock, so the rows land in the same metadata-store
transaction as the commit record: a snapshot is recorded with its events or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lsmlake.metastore import MetaStore
from lsmlake.table.write import CommitMessage


@dataclass(frozen=True)
class SnapshotEvent:
    """One snapshot to announce: what it changed, per (partition, bucket), and when.

    `plan_id` names the compaction plan a COMPACT snapshot completed ("" for none).
    """

    table_id: str
    snapshot_id: int
    kind: str
    commit_time_ms: int
    changes: Sequence[CommitMessage]
    plan_id: str = ""


@dataclass(frozen=True)
class EventMessage:
    """One row of the outbox: the topic, key and payload the relay publishes."""

    topic: str
    key: bytes
    payload: bytes


EventEncoder = Callable[[SnapshotEvent], Sequence[EventMessage]]


def record_events(store: MetaStore, encode: EventEncoder, event: SnapshotEvent) -> None:
    """Add the outbox rows of `event`; call inside the table's `commit_lock`."""
    for e in encode(event):
        store.outbox.add_event(event.table_id, event.snapshot_id, e.topic, e.key, e.payload)
