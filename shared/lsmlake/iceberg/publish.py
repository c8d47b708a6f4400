"""Publishing a Paimon table's latest snapshot as Iceberg metadata beside it.

A publication:
1. reads the current Iceberg metadata (`version-hint.text`); nothing to do when it is at the latest snapshot;
2. computes the files Iceberg readers gain and lose (`file_changes`): from the Paimon snapshot's delta when the
   metadata is at its parent, else the whole visible set;
3. keeps the previous snapshot's manifests that lose no file (without reading them when nothing was removed),
   rewrites the others with their surviving files, and writes one manifest for the files new to Iceberg (merging
   them all when they are more than `metadata.iceberg.compaction.max.file-num`);
4. creates `v<snapshot id>.metadata.json` only if absent (a concurrent publisher of the same snapshot wins: its
   metadata describes the same files), then moves `version-hint.text`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lsmlake.errors import AlreadyExistsError, LakeError, NotFoundError
from lsmlake.format.schema import TableSchema
from lsmlake.format.snapshot import COMPACT, Snapshot
from lsmlake.iceberg import manifests as mf
from lsmlake.iceberg.file_changes import FileChanges, delta_changes, full_changes
from lsmlake.iceberg.metadata import IcebergSnapshot, partition_spec, snapshots_of, table_metadata
from lsmlake.iceberg.options import TABLE_LOCATION, IcebergSettings, settings
from lsmlake.iceberg.types import check_types, iceberg_schema
from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)
VERSION_HINT = "version-hint.text"


@dataclass(frozen=True)
class IcebergPublication:
    """What a publication left: the current Iceberg snapshot and metadata file, and how many snapshots it added.

    `published` is 1 when this call wrote the metadata of the latest Paimon snapshot (one Iceberg snapshot, even when
    it catches up over several Paimon snapshots), 0 when it was already published (by this or another process)."""

    snapshot_id: int
    metadata_location: str
    published: int


def iceberg_metadata_dir(table: FileStoreTable) -> str:
    """`<table>/metadata`, or with catalog storage `<warehouse>/iceberg/<db>/<table>/metadata` (Paimon's layout)."""
    s = settings(table.options.raw)
    if s.location == TABLE_LOCATION:
        return f"{table.path}/metadata"
    db_path, name = table.path.rsplit("/", 1)
    root, db_dir = db_path.rsplit("/", 1)
    db = db_dir[:-3] if db_dir.endswith(".db") else db_dir
    return f"{root}/iceberg/{db}/{name}/metadata"


def _table_location(table: FileStoreTable, s: IcebergSettings) -> str:
    if s.location == TABLE_LOCATION:
        return table.io.uri(table.path)
    return table.io.uri(iceberg_metadata_dir(table).rsplit("/", 1)[0])


def _read_hint(table: FileStoreTable, directory: str) -> int | None:
    try:
        return int(table.io.read_bytes(f"{directory}/{VERSION_HINT}").decode().strip())
    except (NotFoundError, FileNotFoundError, ValueError):
        return None


def current_metadata_location(table: FileStoreTable) -> str | None:
    """The current metadata JSON file (from `version-hint.text`); None if never published."""
    directory = iceberg_metadata_dir(table)
    hint = _read_hint(table, directory)
    return None if hint is None else table.io.uri(f"{directory}/v{hint}.metadata.json")


def load_current(table: FileStoreTable, directory: str) -> tuple[int, dict[str, Any]] | None:
    """The current metadata (its version and JSON); None if never published.

    A concurrent publication may delete the version the hint named (`delete-after-commit`) between the two reads:
    the hint is then read again, and names a newer one."""
    for attempt in range(3):
        hint = _read_hint(table, directory)
        if hint is None:
            return None
        try:
            return hint, json.loads(table.io.read_bytes(f"{directory}/v{hint}.metadata.json"))
        except (NotFoundError, FileNotFoundError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def publish_iceberg(table: FileStoreTable) -> IcebergPublication | None:
    """Bring the table's Iceberg metadata up to its latest snapshot; None when the option is off or no snapshot."""
    s = settings(table.options.raw)
    if not s.enabled:
        return None
    return _publish(table, s)


def publish_iceberg_now(table: FileStoreTable) -> IcebergPublication | None:
    """Publish the latest snapshot whatever the table's option says (its other Iceberg options still apply)."""
    s = settings(table.options.raw)
    if not s.enabled:
        s = IcebergSettings(TABLE_LOCATION, s.location, s.previous_versions_max, s.delete_after_commit, s.codec,
                            s.max_manifests)
    return _publish(table, s)


def _publish(table: FileStoreTable, s: IcebergSettings) -> IcebergPublication | None:
    table.refresh_schema()
    snap = table.latest_snapshot()
    if snap is None:
        return None
    schema = table.schemas.schema(snap.schema_id)
    check_types(table.schema)
    directory = iceberg_metadata_dir(table)
    previous = load_current(table, directory)
    if previous is not None and previous[1].get("table-uuid") != table.table_uuid:
        # catalog-location metadata outlives a dropped table: publishing over it would mix two tables' histories
        raise AlreadyExistsError(
            f"the Iceberg metadata in {table.io.uri(directory)} belongs to another table (uuid "
            f"{previous[1].get('table-uuid')}, not {table.table_uuid}: one dropped under the same name?); remove "
            "that folder to publish this table")
    meta_path = f"{directory}/v{snap.id}.metadata.json"
    if previous is not None and previous[0] >= snap.id:
        return IcebergPublication(previous[0], table.io.uri(f"{directory}/v{previous[0]}.metadata.json"), 0)
    old_snapshots = snapshots_of(previous[1]) if previous is not None else []
    parent = old_snapshots[-1] if old_snapshots else None
    writer = _Writer(table, s, directory, schema, snap)
    changes = _changes(table, schema, snap, previous[0] if previous is not None else None, directory)
    old_manifests = read_list(table, parent.manifest_list) \
        if parent is not None else []
    metas = writer.manifests(old_manifests, changes, mf.DATA)
    metas += writer.manifests(old_manifests, changes, mf.DELETES, set(writer.new_paths) if changes.full else set())
    list_path = f"{directory}/snap-{snap.id}-{uuid.uuid4()}.avro"
    table.io.write_bytes(list_path, mf.encode_manifest_list(metas, snap.id, parent.snapshot_id if parent else None,
                                                             snap.id, s.codec))
    writer.written.append(list_path)
    operation = _operation(parent is None, writer, None if changes.full else snap.commit_kind)
    snapshots = [*old_snapshots, IcebergSnapshot(snap.id, parent.snapshot_id if parent else None, snap.time_millis,
                                                 table.io.uri(list_path), operation, schema.id)]
    log = list(previous[1].get("metadata-log", [])) if previous is not None else []
    if previous is not None:
        log.append({"timestamp-ms": previous[1]["last-updated-ms"],
                    "metadata-file": table.io.uri(f"{directory}/v{previous[0]}.metadata.json")})
    every_version = log
    log = log[-s.previous_versions_max:] if s.previous_versions_max else []
    schemas = _schemas(table, snapshots, schema)
    body = table_metadata(table.table_uuid, _table_location(table, s), schemas, schema, snapshots, log,
                          previous[1].get("properties", {}) if previous is not None else {})
    if not table.io.write_if_absent(meta_path, json.dumps(body, separators=(",", ":")).encode()):
        # someone else published this snapshot: theirs stands, ours is garbage no metadata names
        for p in writer.written:
            table.io.delete_quietly(p)
        _write_hint(table, directory, snap.id)
        return IcebergPublication(snap.id, table.io.uri(meta_path), 0)
    _write_hint(table, directory, snap.id)
    if previous is not None and s.delete_after_commit:
        # the versions that left the log (no listing: the metadata folder holds every manifest too)
        for entry in every_version[:len(every_version) - len(log)]:
            table.io.delete_quietly(storage_path(table, entry["metadata-file"]))
    return IcebergPublication(snap.id, table.io.uri(meta_path), 1)


def _changes(table: FileStoreTable, schema: TableSchema, snap: Snapshot, published: int | None,
             directory: str) -> FileChanges:
    """The delta of `snap` when the metadata is at its parent (a commit costs what it changed), else everything."""
    if published is not None and published == snap.id - 1:
        try:
            previous = table.snapshots.snapshot(published)
        except LakeError:
            previous = None  # expired: its files are not known any more
        if previous is not None:
            return delta_changes(table, schema, previous, snap, directory)
    return full_changes(table, schema, snap, directory)


def _write_hint(table: FileStoreTable, directory: str, snapshot_id: int) -> None:
    current = _read_hint(table, directory)
    if current is None or current < snapshot_id:  # a slower publisher of an older snapshot never moves it back
        table.io.overwrite_atomic(f"{directory}/{VERSION_HINT}", str(snapshot_id).encode())


def storage_path(table: FileStoreTable, location: str) -> str:
    """A location written in the metadata (with the storage's scheme) as a path of the table's FileIO."""
    return location.split("://", 1)[1] if "://" in location and not table.io.local else location


def read_entries(table: FileStoreTable, manifest: str) -> list[mf.IcebergFile]:
    """The live files of a manifest named in the metadata."""
    return mf.read_manifest(table.io.read_bytes(storage_path(table, manifest)))


def read_list(table: FileStoreTable, manifest_list: str) -> list[mf.ManifestMeta]:
    return mf.read_manifest_list(table.io.read_bytes(storage_path(table, manifest_list)))


def _schemas(table: FileStoreTable, snapshots: Sequence[IcebergSnapshot], current: TableSchema) -> list[TableSchema]:
    """Every Paimon schema up to the current one: the name mapping needs each field's old names too."""
    return [table.schemas.schema(i) for i in table.schemas.ids() if i <= current.id] or [current]


def _operation(first: bool, writer: _Writer, commit_kind: str | None) -> str:
    """Iceberg's name for the change: a compaction rewrites rows without changing them (`replace`); `commit_kind`:
    the Paimon snapshot's when the publication is its delta alone."""
    if first or not writer.removed:
        return "append"
    if commit_kind == COMPACT:
        return "replace"
    if not writer.added:
        return "delete"
    return "overwrite"


class _Writer:
    """Writes the manifests of one publication, keeping those of the previous snapshot whose files all stay."""

    def __init__(self, table: FileStoreTable, s: IcebergSettings, directory: str, schema: TableSchema,
                 snap: Snapshot) -> None:
        self.table, self.s, self.directory, self.snap = table, s, directory, snap
        self.schema_json = iceberg_schema(schema)
        self.spec = partition_spec(schema)
        self.partition_types = schema.types_of(schema.partition_keys)
        self.partition = mf.partition_struct(schema.partition_keys, self.partition_types)
        self.written: list[str] = []
        self.added = 0
        self.removed = 0
        self.new_paths: set[str] = set()

    def manifests(self, old: Sequence[mf.ManifestMeta], changes: FileChanges, content: int,
                  fresh: set[str] | None = None) -> list[mf.ManifestMeta]:
        """The manifests of `content` for the new snapshot: the old ones left as they are unless they lose a file,
        the others rewritten with their surviving files, and one for the files new to Iceberg.

        `fresh`: data files new to Iceberg; their delete files go in again (a delete applies to data files of a
        lower or equal sequence number only)."""
        files = changes.data if content == mf.DATA else changes.deletes
        drop = changes.drop(content)
        fresh = fresh or set()
        kept: list[mf.ManifestMeta] = []
        carried: list[mf.IcebergFile] = []  # files of rewritten manifests, with their first snapshot
        present: set[str] = set()
        for m in (m for m in old if m.content == content):
            if not changes.needs_old_entries(content) or not changes.may_lose_files(self.partition_types, m):
                kept.append(m)
                continue
            entries = read_entries(self.table, m.path)
            alive = [e for e in entries if not drop(e) and e.referenced not in fresh]
            present.update(e.path for e in alive)
            if len(alive) == len(entries):
                kept.append(m)
            else:
                self.removed += len(entries) - len(alive)
                carried.extend(alive)
        new = [f for f in files if f.path not in present]
        self.added += len(new)
        self.new_paths.update(f.path for f in new)
        out = list(kept)
        if len(out) + 2 > self.s.max_manifests:  # merge everything into one manifest
            carried = [e for m in kept for e in read_entries(self.table, m.path)] + carried
            out = []
        if carried or new:
            out.append(self._write([*carried, *new], content))
        return out

    def _write(self, files: Sequence[mf.IcebergFile], content: int) -> mf.ManifestMeta:
        path = f"{self.directory}/{uuid.uuid4()}-m{len(self.written)}.avro"
        data = mf.encode_manifest(files, self.snap.id, self.partition, content, self.schema_json, self.spec,
                                  self.s.codec)
        self.table.io.write_bytes(path, data)
        self.written.append(path)
        return mf.manifest_meta(self.table.io.uri(path), len(data), content, files, self.snap.id, self.snap.id,
                                self.partition_types)

