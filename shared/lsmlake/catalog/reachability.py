"""What a table's snapshots and tags reach: the paths of their manifests, index files, data and changelog files.

Expiration deletes only what no kept snapshot or tag reaches, and orphan cleanup what none reaches at
all; both walk the table's metadata the same way, here.

Paimon's layout: a tag is `tag/tag-<name>` holding the tagged snapshot's JSON, so the snapshot file
itself expires like any other while the tag keeps its manifests and data files.
"""

from __future__ import annotations

import io as _io
import posixpath
from collections.abc import Iterable
from typing import Any, cast

import fastavro

from lsmlake.errors import CorruptMetadataError, NotFoundError
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.manifest import ADD, ManifestEntry
from lsmlake.format.snapshot import Snapshot
from lsmlake.table.file_store_table import FileStoreTable

TAG_PREFIX = "tag-"


class TablePaths:
    """Locations of a table's files, derived from manifest entries."""

    def __init__(self, table: FileStoreTable) -> None:
        self.table = table
        schema = table.schema
        self.part_types = schema.types_of(schema.partition_keys)
        self._dirs: dict[tuple[bytes, int], str] = {}

    def data_files(self, e: ManifestEntry) -> list[str]:
        key = (e.partition, e.bucket)
        if key not in self._dirs:
            values = deserialize_row(e.partition, self.part_types)
            self._dirs[key] = bucket_dir(self.table.path, self.table.schema.partition_dir(values), e.bucket)
        d = self._dirs[key]
        if e.file.external_path:
            return [e.file.external_path]
        return [f"{d}/{e.file.file_name}"] + [f"{d}/{x}" for x in e.file.extra_files]

    def manifest(self, name: str) -> str:
        return f"{self.table.path}/manifest/{name}"

    def index(self, name: str) -> str:
        return f"{self.table.path}/index/{name}"


def _index_files(table: FileStoreTable, index_manifest: str | None) -> list[str]:
    """Index file names listed in an index manifest."""
    if not index_manifest:
        return []
    try:
        data = table.io.read_bytes(f"{table.path}/manifest/{index_manifest}")
    except NotFoundError:
        return []
    return [cast(dict[str, Any], r)["_FILE_NAME"] for r in fastavro.reader(_io.BytesIO(data))]


def metadata_files(table: FileStoreTable, s: Snapshot) -> tuple[set[str], set[str]]:
    """(manifest-folder names, index-folder names) a snapshot references."""
    names = {s.base_manifest_list, s.delta_manifest_list}
    if s.changelog_manifest_list:
        names.add(s.changelog_manifest_list)
    for lst in (s.base_manifest_list, s.delta_manifest_list, s.changelog_manifest_list):
        if lst:
            try:
                names.update(m.file_name for m in table.manifests.uncached().read_list(lst))
            except NotFoundError:
                pass
    index = set()
    if s.index_manifest:
        names.add(s.index_manifest)
        index.update(_index_files(table, s.index_manifest))
    return names, index


def reached_by(table: FileStoreTable, paths: TablePaths, s: Snapshot) -> set[str]:
    """Every path a snapshot reaches: its file, manifests, index files, live data files and changelog."""
    out = {table.snapshots.path(s.id)}
    meta, index = metadata_files(table, s)
    out.update(paths.manifest(n) for n in meta)
    out.update(paths.index(n) for n in index)
    for e in table.manifests.uncached().live(s.base_manifest_list, s.delta_manifest_list).values():
        out.update(paths.data_files(e))
    if s.changelog_manifest_list:
        for m in table.manifests.uncached().read_list(s.changelog_manifest_list):
            for e in table.manifests.uncached().read_manifest(m.file_name):
                out.update(paths.data_files(e))
    return out


def tagged_snapshots(table: FileStoreTable) -> list[tuple[str, Snapshot]]:
    """(name, snapshot) of every tag of the table: `tag/tag-<name>` holds the tagged snapshot's JSON."""
    out = []
    for info in table.io.list(f"{table.path}/tag"):
        if info.is_dir or not info.name.startswith(TAG_PREFIX):
            continue
        try:
            out.append((info.name[len(TAG_PREFIX):], Snapshot.from_json(table.io.read_bytes(info.path))))
        except NotFoundError:
            continue  # deleted while we listed: it keeps nothing any more
        except CorruptMetadataError as e:
            raise CorruptMetadataError(f"tag file {info.path}: {e}; nothing is deleted while a tag cannot "
                                       "be read, since what it keeps is unknown") from None
    return out


def tag_reach(table: FileStoreTable, paths: TablePaths, name: str, s: Snapshot) -> set[str]:
    """What a tag keeps: everything its snapshot reaches (the snapshot file aside: the tag holds that)."""
    try:
        return reached_by(table, paths, s) - {table.snapshots.path(s.id)}
    except NotFoundError as e:
        if table.io.exists(f"{table.path}/tag/{TAG_PREFIX}{name}"):
            raise NotFoundError(f"tag {name!r} (snapshot {s.id}) of {table.identifier} is broken: {e}; nothing "
                                "is deleted until the file is restored or the tag, unreadable now, is deleted"
                                ) from None
        return set()  # the tag was deleted while we read it


def files_reached_since(table: FileStoreTable, after: int) -> set[str]:
    """The data and changelog files that a retained snapshot newer than `after`, or a tag of one, can reach, among
    the files written since snapshot `after` was the latest (a compaction run's outputs): such a file came in
    through the delta or changelog of a newer snapshot, or, when that snapshot has expired and the file is still
    live, through the oldest retained snapshot. What this reads grows with the snapshots since `after`, not with
    the table's history, which is what a rollback under the table's commit lock can afford.

    Manifests are read through the table's cache (they never change); a snapshot expired while we read is skipped
    as in `referenced_files`, and one that still exists with a manifest missing raises."""
    paths = TablePaths(table)
    out: set[str] = set()
    earliest, latest = table.snapshots.earliest_id(), table.snapshots.latest_id()
    store = table.manifests

    def reach(sid: int, whole: bool) -> None:
        try:
            s = table.snapshots.snapshot(sid)
            entries = list(store.live(s.base_manifest_list, s.delta_manifest_list).values()) if whole else \
                [e for e in store.entries(store.read_list(s.delta_manifest_list)) if e.kind == ADD]
            if s.changelog_manifest_list:
                entries += store.entries(store.read_list(s.changelog_manifest_list))
        except NotFoundError:
            if table.io.exists(table.snapshots.path(sid)):
                raise
            return
        for e in entries:
            out.update(posixpath.basename(p) for p in paths.data_files(e))

    if earliest is not None and latest is not None:
        if earliest > after + 1:
            reach(earliest, whole=True)
        for sid in range(max(after + 1, earliest), latest + 1):
            reach(sid, whole=False)
    for name, s in tagged_snapshots(table):
        if s.id > after:
            out.update(posixpath.basename(p) for p in tag_reach(table, paths, name, s))
    return out


def referenced_files(table: FileStoreTable, snapshots: Iterable[Snapshot], tags: bool = True) -> set[str]:
    """Every path that one of the snapshots, or (with `tags`) one of the table's tags, can reach.

    Expiration may run beside us (another catalog replica, or the ExpireSnapshots call beside the
    scheduled cleanup) and delete a snapshot's manifests while we read them. Such a snapshot is
    skipped: what only it reached is expiration's to delete, and what a newer snapshot also reaches
    is found through that one. A file missing from a snapshot that still exists is a broken table;
    that raises, so cleanup stops rather than deleting on an incomplete picture. So does a tag that
    still exists and cannot be read.
    """
    paths = TablePaths(table)
    out: set[str] = set()
    for s in snapshots:
        try:
            reached = reached_by(table, paths, s)
        except NotFoundError:
            if table.io.exists(table.snapshots.path(s.id)):
                raise
            continue
        out.update(reached)
    if tags:
        for name, s in tagged_snapshots(table):
            out |= tag_reach(table, paths, name, s)
    return out
