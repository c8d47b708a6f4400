"""Sequence numbers: who hands them out, so that the later change of a key always carries the larger one.

Every row of a primary-key table carries `_SEQUENCE_NUMBER`; merges keep, per key, the row with the
largest (after `sequence.field`, when the table has one). So the order in which writers number rows *is*
the order in which their changes win. Two numbering schemes live here:

- `RestoredSequences`: one process is the only writer of its buckets (a library write, a Spark task). It
  restores each bucket's maximum from the table once and counts on.
- An authority outside the process (the catalog service, see `catalog_svc`), for writers that share
  buckets: several writer replicas, gRPC and Kafka ingestion, restarts. A writer asks it for a range per
  bucket only when it flushes the bucket; its buffers keep just the relative order of their rows until
  then. Ranges are monotone per bucket and never below what the table's snapshots hold
  (`committed_floors`), so a change acknowledged before another is sent is numbered below it, whichever
  writer carries each, and numbering resumes above rows that other Paimon engines committed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from lsmlake.errors import NotFoundError
from lsmlake.format.manifest import ADD, ManifestStore
from lsmlake.format.manifest_prune import BucketFilter
from lsmlake.format.snapshot import Snapshot, SnapshotManager

BucketKey = tuple[bytes, int]  # (serialized partition, bucket)


class SequenceAllocator(Protocol):
    """Hands out consecutive sequence numbers per (partition, bucket)."""

    def allocate(self, counts: Mapping[BucketKey, int]) -> dict[BucketKey, int]:
        """Reserve `counts[key]` numbers for each bucket; the first number of each range."""
        ...


class SnapshotMaxSequences:
    """The largest sequence number of buckets in one snapshot (-1 for a bucket without files).

    Only the manifests whose partition statistics and buckets can hold the buckets asked about are read (a
    writer's cost is that of its buckets, not of the table); what was found is kept for the next question.
    """

    def __init__(self, manifests: ManifestStore, snapshot: Snapshot | None) -> None:
        self.manifests = manifests
        self.snapshot = snapshot
        self._known: dict[BucketKey, int] = {}

    def __call__(self, partition: bytes, bucket: int) -> int:
        return self.many([(partition, bucket)])[(partition, bucket)]

    def many(self, keys: Collection[BucketKey]) -> dict[BucketKey, int]:
        missing = [k for k in keys if k not in self._known]
        if missing:
            found = dict.fromkeys(missing, -1)
            snap = self.snapshot
            if snap is not None:
                wanted = BucketFilter(missing, self.manifests.partition_types)
                for e in self.manifests.live(snap.base_manifest_list, snap.delta_manifest_list, wanted).values():
                    k = (e.partition, e.bucket)
                    found[k] = max(found[k], e.file.max_sequence_number)
            self._known.update(found)
        return {k: self._known[k] for k in keys}


class RestoredSequences:
    """Numbers for a writer that is alone on its buckets: each bucket's restored maximum + 1, then counting on."""

    def __init__(self, restore_max: Callable[[bytes, int], int]) -> None:
        self.restore_max = restore_max
        self._next: dict[BucketKey, int] = {}

    def allocate(self, counts: Mapping[BucketKey, int]) -> dict[BucketKey, int]:
        missing = [k for k in counts if k not in self._next]
        if missing and isinstance(self.restore_max, SnapshotMaxSequences):
            # every new bucket of one flush in one pass over the manifests that can hold them
            for key, top in self.restore_max.many(missing).items():
                self._next[key] = top + 1
        first = {}
        for key, n in counts.items():
            if key not in self._next:
                self._next[key] = self.restore_max(*key) + 1
            first[key] = self._next[key]
            self._next[key] += n
        return first


class TableFiles(Protocol):
    """The snapshots and manifests of a table (a `FileStore`)."""

    @property
    def snapshots(self) -> SnapshotManager: ...
    @property
    def manifests(self) -> ManifestStore: ...


def committed_floors(table: TableFiles, synced_to: int | None) -> tuple[dict[BucketKey, int], int | None]:
    """One above the largest sequence number each bucket's data files hold, from the snapshots after `synced_to`.

    Returns the floors and the latest snapshot id they account for. Only the delta manifests of the newer
    snapshots are read, unless the table was never synced or a snapshot in between is gone (expired): then
    every live file of the latest snapshot is. Files that later snapshots delete keep their numbers in
    the merged files that replace them, so looking at added files only is enough.
    """
    latest = table.snapshots.latest_id()
    floors: dict[BucketKey, int] = {}
    if latest is None or (synced_to is not None and latest <= synced_to):
        return floors, latest if latest is not None else synced_to

    def add(partition: bytes, bucket: int, max_seq: int) -> None:
        key = (partition, bucket)
        floors[key] = max(floors.get(key, 0), max_seq + 1)

    if synced_to is not None:
        try:
            for sid in range(synced_to + 1, latest + 1):
                snap = table.snapshots.snapshot(sid)
                for meta in table.manifests.read_list(snap.delta_manifest_list):
                    for e in table.manifests.read_manifest(meta.file_name):
                        if e.kind == ADD:
                            add(e.partition, e.bucket, e.file.max_sequence_number)
            return floors, latest
        except NotFoundError:  # expired under us: fall back to the whole latest snapshot
            floors.clear()
    snap = table.snapshots.snapshot(latest)
    for e in table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values():
        add(e.partition, e.bucket, e.file.max_sequence_number)
    return floors, latest
