"""The names of a table's live data files at a snapshot, kept up to date from one snapshot to the next.

A commit built elsewhere (the REST catalog's) must add only files the table does not hold yet, delete only
files it holds, and name as changelog no file it holds: a file added twice is read twice by some readers
and not others, and a live file named as changelog is deleted when that snapshot expires. Reading every
manifest of a table for each commit costs as much as the table's history (pypaimon never merges
manifests), so the last answer per table is kept and moved forward by the delta manifests of the
snapshots committed since; a gap (an expired snapshot, another table under the name) reads it in full.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from lsmlake.errors import NotFoundError
from lsmlake.format.manifest import ADD
from lsmlake.format.snapshot import Snapshot
from lsmlake.table.file_store_table import FileStoreTable

#: a live file: (partition, bucket, file name)
FileKey = tuple[bytes, int, str]
MAX_TABLES = 64
MAX_STEPS = 100  # beyond this many snapshots behind, one full read is cheaper than the deltas


class LiveFiles:
    """Per table (path and identity), the live file names of the last snapshot asked about."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[tuple[str, str], tuple[int, frozenset[FileKey]]] = OrderedDict()

    def at(self, table: FileStoreTable, snap: Snapshot) -> frozenset[FileKey]:
        """The live files of `snap` (the table's latest snapshot, as a rule)."""
        key = (table.path, table.table_uuid)
        with self._lock:
            known = self._known.get(key)
        live = None
        if known is not None and known[0] == snap.id:
            live = known[1]
        elif known is not None and known[0] < snap.id <= known[0] + MAX_STEPS:
            live = self._forward(table, known[0], known[1], snap.id)
        if live is None:
            live = frozenset((e.partition, e.bucket, e.file.file_name)
                             for e in table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values())
        with self._lock:
            self._known[key] = (snap.id, live)
            self._known.move_to_end(key)
            while len(self._known) > MAX_TABLES:
                self._known.popitem(last=False)
        return live

    @staticmethod
    def _forward(table: FileStoreTable, from_id: int, live: frozenset[FileKey],
                 to_id: int) -> frozenset[FileKey] | None:
        files = set(live)
        try:
            for sid in range(from_id + 1, to_id + 1):
                s = table.snapshots.snapshot(sid)
                added: set[FileKey] = set()
                deleted: set[FileKey] = set()  # a level upgrade deletes and adds the same file in one delta
                for meta in table.manifests.read_list(s.delta_manifest_list):
                    for e in table.manifests.read_manifest(meta.file_name):
                        (added if e.kind == ADD else deleted).add((e.partition, e.bucket, e.file.file_name))
                files = (files - deleted) | added
        except NotFoundError:
            return None
        return frozenset(files)
