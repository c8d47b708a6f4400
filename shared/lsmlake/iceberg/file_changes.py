"""Which data and position delete files an Iceberg snapshot gains and loses, by Paimon's visibility rules.

Paimon's rules: every file of an append table; only the top level (`num-levels - 1`) of a primary-key table; every
file above level 0 of a primary-key table with deletion vectors, with its vector as a position delete file.

Two ways to get them: `delta_changes` reads one Paimon snapshot's delta (the files it added and deleted) and the
deletion vectors of the buckets it touched, so a commit costs what the commit changed; `full_changes` reads the
whole snapshot, when the Iceberg metadata is further behind (a crash, the option just set, an explicit sync).

A position delete applies to data files of a lower or equal sequence number only, so a data file that becomes
visible (a level-0 file moved up keeps its path) brings its delete file again, with its own sequence number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap

from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.index_manifest import DELETION_VECTORS, IndexEntry
from lsmlake.format.manifest import ADD
from lsmlake.format.schema import TableSchema
from lsmlake.format.snapshot import Snapshot
from lsmlake.format.types import AnyType
from lsmlake.iceberg import manifests as mf
from lsmlake.iceberg import partition_summary, position_deletes
from lsmlake.mergetree.merge.factory import dv_enabled
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.read import load_vectors


@dataclass
class FileChanges:
    """The files to add to Iceberg and the paths to drop from its manifests.

    `full`: `data` and `deletes` are every visible file, and every other file of the manifests goes.
    """

    full: bool
    data: list[mf.IcebergFile] = field(default_factory=list)
    deletes: list[mf.IcebergFile] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)  # data and delete file paths (delta only)
    dropped_partitions: set[tuple[Any, ...]] = field(default_factory=set)  # where they are (delta only)

    def drop(self, content: int) -> Callable[[mf.IcebergFile], bool]:
        """Whether an entry of an existing manifest of `content` leaves it."""
        if not self.full:
            return lambda e: e.path in self.dropped
        wanted = {f.path for f in (self.data if content == mf.DATA else self.deletes)}
        return lambda e: e.path not in wanted

    def needs_old_entries(self, content: int) -> bool:
        return self.full or bool(self.dropped)

    def may_lose_files(self, partition_types: Sequence[AnyType], manifest: mf.ManifestMeta) -> bool:
        """Whether a manifest can hold a file this change drops (by its partition summary)."""
        return self.full or any(partition_summary.may_hold(partition_types, manifest.partitions, p)
                                for p in self.dropped_partitions)


def visibility(table: FileStoreTable, schema: TableSchema) -> Callable[[DataFileMeta], bool]:
    if not schema.is_primary_key_table:
        return lambda f: True
    if dv_enabled(schema):
        return lambda f: f.level > 0
    top = table.options.num_levels() - 1
    return lambda f: f.level == top


class _Files:
    """Builds the Iceberg file records of one publication (and writes the delete files it needs)."""

    def __init__(self, table: FileStoreTable, schema: TableSchema, snap: Snapshot, directory: str) -> None:
        self.table, self.schema, self.snap, self.directory = table, schema, snap, directory

    def bucket_dir(self, partition: tuple[Any, ...], bucket: int) -> str:
        return bucket_dir(self.table.path, self.schema.partition_dir(list(partition)), bucket)

    def data(self, path: str, partition: tuple[Any, ...], f: DataFileMeta) -> mf.IcebergFile:
        return mf.IcebergFile(mf.DATA, path, partition, f.row_count, f.file_size, self.snap.id, self.snap.id)

    def delete(self, data_path: str, data_name: str, partition: tuple[Any, ...], vector: BitMap) -> mf.IcebergFile:
        """The position delete file of a vector; written unless a publication already wrote it (same name, same
        bytes)."""
        name = self.delete_path(data_name, vector)
        io = self.table.io
        size = io.size_or_none(name)
        if size is None:
            data = position_deletes.encode(data_path, vector)
            io.write_bytes(name, data)
            size = len(data)
        return mf.IcebergFile(mf.POSITION_DELETES, io.uri(name), partition, len(vector), size, self.snap.id,
                              self.snap.id, data_path)

    def delete_path(self, data_name: str, vector: BitMap) -> str:
        return f"{self.directory}/{position_deletes.delete_file_name(data_name, vector)}"


def full_changes(table: FileStoreTable, schema: TableSchema, snap: Snapshot, directory: str) -> FileChanges:
    """Every file Iceberg readers must see at `snap`."""
    files = _Files(table, schema, snap, directory)
    visible = visibility(table, schema)
    dv = dv_enabled(schema)
    out = FileChanges(full=True)
    for split in table.plan(snap.id, all_levels=True):
        directory_b = files.bucket_dir(split.partition_values, split.bucket)
        vectors = load_vectors(table.io, table.path, split.dv_index) if dv else {}
        for f in split.files:
            if not visible(f):
                continue
            path = table.io.uri(f.path_in(directory_b))
            out.data.append(files.data(path, split.partition_values, f))
            vector = vectors.get(f.file_name)
            if vector:
                out.deletes.append(files.delete(path, f.file_name, split.partition_values, vector))
    return out


def _dv_entries(table: FileStoreTable, snap: Snapshot) -> dict[tuple[bytes, int], IndexEntry]:
    return {(e.partition, e.bucket): e for e in table.indexes.read(snap.index_manifest)
            if e.index_type == DELETION_VECTORS}


def delta_changes(table: FileStoreTable, schema: TableSchema, previous: Snapshot, snap: Snapshot,
                  directory: str) -> FileChanges:
    """What `snap` changed since `previous` (its parent), from its delta manifests and touched buckets' vectors."""
    files = _Files(table, schema, snap, directory)
    visible = visibility(table, schema)
    io = table.io
    added: dict[str, tuple[tuple[Any, ...], DataFileMeta]] = {}
    deleted: set[str] = set()
    touched: set[tuple[bytes, int]] = set()
    partitions: dict[bytes, tuple[Any, ...]] = {}
    names: dict[str, str] = {}  # data file name -> its path (external paths included)
    partition_of: dict[str, tuple[Any, ...]] = {}
    for e in table.manifests.entries(table.manifests.read_list(snap.delta_manifest_list)):
        if e.bucket == POSTPONE_BUCKET:
            continue
        part = partitions.setdefault(e.partition, tuple(table.partition_values(e.partition)))
        path = io.uri(e.file.path_in(files.bucket_dir(part, e.bucket)))
        names[e.file.file_name] = path
        touched.add((e.partition, e.bucket))
        if not visible(e.file):
            continue
        if e.kind == ADD:
            added[path] = (part, e.file)
        else:
            deleted.add(path)
            partition_of[path] = part
    out = FileChanges(full=False)
    gone = deleted - added.keys()
    new = added.keys() - deleted
    out.dropped |= gone
    out.dropped_partitions |= {partition_of[p] for p in gone}
    out.data = [files.data(p, *added[p]) for p in sorted(new)]
    if not dv_enabled(schema):
        return out
    old_dv, new_dv = _dv_entries(table, previous), _dv_entries(table, snap)
    touched |= {k for k in old_dv.keys() | new_dv.keys() if old_dv.get(k) != new_dv.get(k)}
    for key in sorted(touched):
        part = partitions.setdefault(key[0], tuple(table.partition_values(key[0])))
        before = load_vectors(io, table.path, old_dv.get(key))
        after = load_vectors(io, table.path, new_dv.get(key))
        for name in sorted(before.keys() | after.keys()):
            data_path = names.get(name) or io.uri(f"{files.bucket_dir(part, key[1])}/{name}")
            old, cur = before.get(name), after.get(name)
            again = data_path in new  # newly visible: its deletes must carry a sequence number not below it
            if old is not None and (cur is None or old != cur or data_path in gone or again):
                out.dropped.add(io.uri(files.delete_path(name, old)))
                out.dropped_partitions.add(part)
            if cur is not None and data_path not in gone and (old != cur or again):
                out.deletes.append(files.delete(data_path, name, part, cur))
    return out
