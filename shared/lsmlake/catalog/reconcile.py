"""Record the snapshots that reached the warehouse without reaching the metadata store.

A catalog commit publishes the snapshot file first and records the commit and its outbox events in the
metadata store second. A catalog killed between the two leaves a snapshot that no event announces; a
Paimon engine writing straight into the warehouse (Spark, Flink, pypaimon) leaves such snapshots too.
`reconcile_table` finds them (every snapshot id above the last one recorded) and records each with its
events, rebuilt from the snapshot's delta and changelog manifests, and the client writes it holds (from
its properties). It runs under the table's commit lock: at start-up for every table, and before each
commit, so that events keep snapshot order. The events are encoded by the caller's `EventEncoder`
(see `snapshot_events`).
"""

from __future__ import annotations

import json
import logging

from lsmlake.catalog.snapshot_events import EventEncoder, SnapshotEvent, record_events
from lsmlake.errors import LakeError
from lsmlake.format.manifest import ADD
from lsmlake.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from lsmlake.metastore import MetaStore
from lsmlake.metastore.request_ids import MAX_STORED_REQUEST_ID, check_request_ids
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

WRITES_PROPERTY = "lsmlake.request-ids"  # the snapshot property listing the client writes it holds (JSON list)


def snapshot_changes(table: FileStoreTable, snap: Snapshot) -> list[CommitMessage]:
    """The per-bucket file changes a snapshot made, read back from its delta and changelog manifests."""
    by_bucket: dict[tuple[bytes, int], CommitMessage] = {}

    def changes(partition: bytes, bucket: int, total: int) -> CommitMessage:
        c = by_bucket.get((partition, bucket))
        if c is None:
            c = by_bucket[(partition, bucket)] = CommitMessage(partition, bucket, total)
        return c

    for meta in table.manifests.read_list(snap.delta_manifest_list):
        for e in table.manifests.read_manifest(meta.file_name):
            target = changes(e.partition, e.bucket, e.total_buckets)
            (target.new_files if e.kind == ADD else target.deleted_files).append(e.file)
    if snap.changelog_manifest_list:
        for meta in table.manifests.read_list(snap.changelog_manifest_list):
            for e in table.manifests.read_manifest(meta.file_name):
                changes(e.partition, e.bucket, e.total_buckets).changelog_files.append(e.file)
    return [by_bucket[k] for k in sorted(by_bucket)]


def snapshot_writes(snap: Snapshot) -> list[str]:
    """The client write ids a snapshot committed, from its properties (none when unreadable: logged)."""
    text = (snap.properties or {}).get(WRITES_PROPERTY)
    if not text:
        return []
    try:
        ids = json.loads(text)
        if not isinstance(ids, list):
            raise ValueError(f"a JSON {type(ids).__name__}, not a list")
        check_request_ids(ids, MAX_STORED_REQUEST_ID)
    except (ValueError, LakeError) as e:
        _log.warning("snapshot %d: property %s is not a list of request ids (%s); ignored", snap.id,
                     WRITES_PROPERTY, e)
        return []
    return list(ids)


def reconcile_table(store: MetaStore, table: FileStoreTable, table_id: str, encode: EventEncoder,
                    expected: bool = False) -> list[int]:
    """Record every published but unrecorded snapshot of a table with its events (as `encode` writes them);
    the ids recorded. `expected`: the caller just published them (a REST commit), so finding them is no news.

    Call it inside the table's `commit_lock`. Snapshots already expired cannot be announced and are skipped.
    """
    latest = table.snapshots.latest_id()
    if latest is None:
        return []
    recorded = store.commits.last_recorded_snapshot(table_id) or 0
    if recorded >= latest:
        return []
    earliest = table.snapshots.earliest_id() or 1
    done = []
    for sid in range(max(recorded + 1, earliest), latest + 1):
        snap = table.snapshots.snapshot(sid)
        kind = snap.commit_kind
        identifier = snap.commit_identifier
        if identifier != BATCH_COMMIT_IDENTIFIER \
                and store.commits.find_commit(table_id, snap.commit_user, identifier, kind):
            identifier = BATCH_COMMIT_IDENTIFIER  # the same key was recorded for another snapshot: never match it
        store.commits.record_commit(table_id, snap.commit_user, identifier, kind, sid)
        writes = snapshot_writes(snap)
        known = store.commits.find_writes(table_id, writes) if writes else {}
        store.commits.record_writes(table_id, [w for w in writes if w not in known], sid)
        record_events(store, encode, SnapshotEvent(table_id, sid, kind, snap.time_millis,
                                                   snapshot_changes(table, snap)))
        done.append(sid)
    if done and not expected:
        _log.warning("table %s: recorded %d snapshot(s) published without a record: %s", table_id, len(done),
                     done if len(done) <= 10 else f"{done[:10]}...")
    return done
