"""Where Kafka ingestion keeps its progress: topic names, and the offsets recorded in snapshot properties.

Each table `db.t` is fed by the topic `lake.ingest.db.t`; rejected messages go to `lake.deadletter.db.t`.
A commit of ingested rows records the next offset of every partition it covers
(`lsmlake.kafka-offset.<topic>.<partition>`) and the Kafka topic id of the log they came from
(`lsmlake.kafka-topic-id.<topic>`) in the snapshot's properties, in the same catalog commit as the rows:
the table itself says how far ingestion got, whatever happened to the writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lsmlake.table.file_store_table import FileStoreTable

TOPIC_PREFIX = "lake.ingest."
DEAD_LETTER_PREFIX = "lake.deadletter."
OFFSET_PROPERTY = "lsmlake.kafka-offset."
TOPIC_ID_PROPERTY = "lsmlake.kafka-topic-id."


class Tables(Protocol):
    """What the offset lookups need of a catalog (the ingest layer does not depend on the catalog's)."""

    def get_table(self, identifier: str) -> FileStoreTable: ...


def offset_key(topic: str, partition: int) -> str:
    return f"{OFFSET_PROPERTY}{topic}.{partition}"


def topic_id_key(topic: str) -> str:
    return f"{TOPIC_ID_PROPERTY}{topic}"


def recorded_topic_id(catalog: Tables, table_id: str, topic: str) -> str | None:
    """The topic id the newest snapshot recording one holds for `topic` (None: no kept snapshot has one)."""
    snapshots = catalog.get_table(table_id).snapshots
    latest, earliest = snapshots.latest_id(), snapshots.earliest_id()
    if latest is None or earliest is None:
        return None
    for sid in range(latest, earliest - 1, -1):
        value = (snapshots.snapshot(sid).properties or {}).get(topic_id_key(topic))
        if value is not None:
            return value
    return None


def committed_offsets(catalog: Tables, table_id: str, topic: str, partitions: Sequence[int],
                      topic_id: str | None = None) -> dict[int, int]:
    """The next offset of each partition, from the newest snapshots that record it (newest first).

    With `topic_id`, the search ends at the first snapshot that records another id for the topic: older
    offsets belong to a log that is gone. Snapshots that record no id (written before ids were kept) count.
    """
    wanted = set(partitions)
    found: dict[int, int] = {}
    snapshots = catalog.get_table(table_id).snapshots
    latest, earliest = snapshots.latest_id(), snapshots.earliest_id()
    if latest is None or earliest is None:
        return found
    for sid in range(latest, earliest - 1, -1):
        props = snapshots.snapshot(sid).properties or {}
        recorded = props.get(topic_id_key(topic))
        if topic_id is not None and recorded is not None and recorded != topic_id:
            break
        for p in list(wanted):
            value = props.get(offset_key(topic, p))
            if value is not None:
                found[p] = int(value)
                wanted.discard(p)
        if not wanted:
            break
    return found
