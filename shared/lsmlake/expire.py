"""Snapshot expiration and orphan-file cleanup.

A file may be deleted only when no retained snapshot can reach it. Expiration removes the oldest
snapshots first (their JSON files), then the files only they reached; a crash in between leaves
unreachable files behind, which orphan cleanup removes later. Nothing reachable is ever deleted.
"""

from __future__ import annotations

import io as _io
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import fastavro

from . import options as opts
from .binary_row import deserialize_row
from .data_file_writer import bucket_dir
from .errors import NotFoundError
from .manifest import ADD, DELETE, ManifestEntry
from .snapshot import Snapshot
from .table import FileStoreTable


@dataclass
class ExpireResult:
    """What one expiration run removed."""

    expired_snapshots: list[int] = field(default_factory=list)
    deleted_data_files: int = 0
    deleted_metadata_files: int = 0


@dataclass
class OrphanResult:
    """What orphan cleanup removed (paths)."""

    deleted: list[str] = field(default_factory=list)


class _Paths:
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
    return [r["_FILE_NAME"] for r in fastavro.reader(_io.BytesIO(data))]


def _metadata_files(table: FileStoreTable, s: Snapshot) -> tuple[set[str], set[str]]:
    """(manifest-folder names, index-folder names) a snapshot references."""
    names = {s.base_manifest_list, s.delta_manifest_list}
    if s.changelog_manifest_list:
        names.add(s.changelog_manifest_list)
    for lst in (s.base_manifest_list, s.delta_manifest_list, s.changelog_manifest_list):
        if lst:
            try:
                names.update(m.file_name for m in table.manifests.read_list(lst))
            except NotFoundError:
                pass
    index = set()
    if s.index_manifest:
        names.add(s.index_manifest)
        index.update(_index_files(table, s.index_manifest))
    return names, index


def expire_snapshots(table: FileStoreTable, now_ms: int | None = None,
                     retain_min: int | None = None, retain_max: int | None = None,
                     time_retained_ms: int | None = None, limit: int | None = None) -> ExpireResult:
    """Expire old snapshots by the table's `snapshot.*` options (arguments override them)."""
    o = table.options
    retain_min = retain_min if retain_min is not None else o.require(opts.SNAPSHOT_NUM_RETAINED_MIN)
    retain_max = retain_max if retain_max is not None else o.require(opts.SNAPSHOT_NUM_RETAINED_MAX)
    time_retained_ms = time_retained_ms if time_retained_ms is not None else o.require(opts.SNAPSHOT_TIME_RETAINED)
    limit = limit if limit is not None else o.require(opts.SNAPSHOT_EXPIRE_LIMIT)
    retain_min = max(1, retain_min)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    sm = table.snapshots
    result = ExpireResult()
    latest, earliest = sm.latest_id(), sm.earliest_id()
    if latest is None or earliest is None:
        return result
    # End (exclusive) of the expired range: keep `retain_min`, expire beyond `retain_max`, else by age.
    end = earliest
    stop = min(latest - retain_min + 1, earliest + limit)
    while end < stop:
        if end < latest - retain_max + 1:
            end += 1
            continue
        if sm.snapshot(end).time_millis < now_ms - time_retained_ms:
            end += 1
            continue
        break
    if end <= earliest:
        return result
    expired = [sm.snapshot(i) for i in range(earliest, end)]
    retained = [s for s in sm.snapshots() if s.id >= end]
    paths = _Paths(table)

    # 1. Data files replaced by a snapshot in (earliest, end]: no retained snapshot reaches them.
    doomed_data: list[str] = []
    for s in expired[1:] + [sm.snapshot(end)]:
        delta: list[ManifestEntry] = []
        for m in table.manifests.read_list(s.delta_manifest_list):
            delta.extend(table.manifests.read_manifest(m.file_name))
        re_added = {(e.partition, e.bucket, e.file.file_name) for e in delta if e.kind == ADD}
        for e in delta:
            if e.kind == DELETE and (e.partition, e.bucket, e.file.file_name) not in re_added:
                doomed_data.extend(paths.data_files(e))
    # Changelog files live as long as the snapshot that added them.
    for s in expired:
        if s.changelog_manifest_list:
            for m in table.manifests.read_list(s.changelog_manifest_list):
                for e in table.manifests.read_manifest(m.file_name):
                    doomed_data.extend(paths.data_files(e))
    # 2. Metadata only expired snapshots reference.
    keep_meta: set[str] = set()
    keep_index: set[str] = set()
    for s in retained:
        m, i = _metadata_files(table, s)
        keep_meta |= m
        keep_index |= i
    doomed_meta: set[str] = set()
    doomed_index: set[str] = set()
    for s in expired:
        m, i = _metadata_files(table, s)
        doomed_meta |= m - keep_meta
        doomed_index |= i - keep_index
    # 3. Snapshot files first, so a crash below leaves only unreachable files (orphans), then the hint.
    for s in expired:
        table.io.delete_quietly(sm.path(s.id))
        result.expired_snapshots.append(s.id)
    sm.write_hint("EARLIEST", end)
    # 4. The files.
    for p in doomed_data:
        if table.io.delete_quietly(p):
            result.deleted_data_files += 1
    for name in doomed_meta:
        if table.io.delete_quietly(paths.manifest(name)):
            result.deleted_metadata_files += 1
    for name in doomed_index:
        if table.io.delete_quietly(paths.index(name)):
            result.deleted_metadata_files += 1
    return result


def referenced_files(table: FileStoreTable, snapshots: Iterable[Snapshot]) -> set[str]:
    """Every path that one of the snapshots can reach.

    Expiration may run beside us (another catalog replica, or the ExpireSnapshots call beside the
    scheduled cleanup) and delete a snapshot's manifests while we read them. Such a snapshot is
    skipped: what only it reached is expiration's to delete, and what a newer snapshot also reaches
    is found through that one. A file missing from a snapshot that still exists is a broken table;
    that raises, so cleanup stops rather than deleting on an incomplete picture.
    """
    paths = _Paths(table)
    out: set[str] = set()
    for s in snapshots:
        try:
            reached = _reached_by(table, paths, s)
        except NotFoundError:
            if table.io.exists(table.snapshots.path(s.id)):
                raise
            continue
        out.update(reached)
    return out


def _reached_by(table: FileStoreTable, paths: _Paths, s: Snapshot) -> set[str]:
    out = {table.snapshots.path(s.id)}
    meta, index = _metadata_files(table, s)
    out.update(paths.manifest(n) for n in meta)
    out.update(paths.index(n) for n in index)
    for e in table.manifests.live(s.base_manifest_list, s.delta_manifest_list).values():
        out.update(paths.data_files(e))
    if s.changelog_manifest_list:
        for m in table.manifests.read_list(s.changelog_manifest_list):
            for e in table.manifests.read_manifest(m.file_name):
                out.update(paths.data_files(e))
    return out


def remove_orphan_files(table: FileStoreTable, older_than_ms: int = 86_400_000,
                        now_ms: int | None = None, dry_run: bool = False) -> OrphanResult:
    """Delete files in the table folder that no snapshot reaches and that are older than the guard.

    The age guard protects files of commits still in progress (written, not yet published).
    """
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    result = OrphanResult()
    # List before reading snapshots: a file committed after the listing is younger than the guard anyway.
    listing = [i for i in table.io.list(table.path, recursive=True) if not i.is_dir]
    keep = referenced_files(table, table.snapshots.snapshots())
    protected_dirs = (f"{table.path}/schema/", f"{table.path}/tag/", f"{table.path}/consumer/",
                      f"{table.path}/branch/", f"{table.path}/changelog/", f"{table.path}/statistics/")
    for info in listing:
        p = info.path
        if p.startswith(protected_dirs) or p in keep:
            continue
        if info.name in ("LATEST", "EARLIEST") and p.startswith(f"{table.path}/snapshot/"):
            continue
        if now_ms - info.mtime_ms < older_than_ms:
            continue
        if not dry_run:
            table.io.delete_quietly(p)
        result.deleted.append(p)
    return result
