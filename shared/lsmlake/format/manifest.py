"""Manifest files (ADD/DELETE entries of data files) and manifest lists (which manifests make a snapshot).

Fields of these records that lsmlake's schema lacks (a newer Paimon's) are read with their definitions from the
file's own schema and written back with them, so a merged manifest or a rewritten list loses nothing.
"""

from __future__ import annotations

import copy
import io
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import fastavro

from lsmlake.errors import CorruptMetadataError, InvalidInputError
from lsmlake.format.avro_schemas import (
    CODECS,
    DATA_FILE_META_FIELDS,
    MANIFEST_ENTRY_FIELDS,
    MANIFEST_FILE_META_FIELDS,
    ExtraFields,
    extra_fields,
    manifest_entry_schema,
    manifest_file_meta_schema,
    unknown_fields,
)
from lsmlake.format.binary_row import deserialize_row, serialize_row
from lsmlake.format.data_file_meta import DataFileMeta, SimpleStats
from lsmlake.format.manifest_prune import ManifestFilter
from lsmlake.format.types import AnyType
from lsmlake.fs.file_io import FileIO

ADD = 0
DELETE = 1


@dataclass(frozen=True)
class ManifestEntry:
    """One ADD or DELETE of a data file in a (partition, bucket)."""

    kind: int
    partition: bytes  # serialized BinaryRow of the partition values
    bucket: int
    total_buckets: int
    file: DataFileMeta
    # unknown entry-level fields: their values and definitions (see the module)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    extra_fields: ExtraFields = field(default=(), compare=False, hash=False)

    @property
    def identifier(self) -> tuple[Any, ...]:
        """What a DELETE must repeat to cancel an ADD (Paimon's file-entry identifier)."""
        return (self.partition, self.bucket) + self.file.identifier

    def as_delete(self) -> ManifestEntry:
        return replace(self, kind=DELETE)

    def to_avro(self) -> dict[str, Any]:
        return {**self.extra, "_VERSION": 2, "_KIND": self.kind, "_PARTITION": self.partition, "_BUCKET": self.bucket,
                "_TOTAL_BUCKETS": self.total_buckets, "_FILE": self.file.to_avro()}

    @staticmethod
    def from_avro(d: dict[str, Any], unknown: ExtraFields = (), file_unknown: ExtraFields = ()) -> ManifestEntry:
        extra = {k: v for k, v in d.items() if k not in MANIFEST_ENTRY_FIELDS}
        return ManifestEntry(d["_KIND"], d["_PARTITION"], d["_BUCKET"], d.get("_TOTAL_BUCKETS", -1),
                             DataFileMeta.from_avro(d["_FILE"], file_unknown), extra,
                             tuple(f for f in unknown if f[0] in extra))


@dataclass(frozen=True)
class ManifestFileMeta:
    """One manifest file as a manifest list records it."""

    file_name: str
    file_size: int
    num_added_files: int
    num_deleted_files: int
    partition_stats: SimpleStats
    schema_id: int
    min_bucket: int | None = None
    max_bucket: int | None = None
    min_level: int | None = None
    max_level: int | None = None
    min_row_id: int | None = None  # the row ids of its entries (row-tracking tables), as Paimon collects them
    max_row_id: int | None = None
    # unknown fields: their values and definitions (see the module)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    extra_fields: ExtraFields = field(default=(), compare=False, hash=False)

    def to_avro(self) -> dict[str, Any]:
        return {**self.extra, "_VERSION": 2, "_FILE_NAME": self.file_name, "_FILE_SIZE": self.file_size,
                "_NUM_ADDED_FILES": self.num_added_files, "_NUM_DELETED_FILES": self.num_deleted_files,
                "_PARTITION_STATS": self.partition_stats.to_avro(), "_SCHEMA_ID": self.schema_id,
                "_MIN_BUCKET": self.min_bucket, "_MAX_BUCKET": self.max_bucket,
                "_MIN_LEVEL": self.min_level, "_MAX_LEVEL": self.max_level,
                "_MIN_ROW_ID": self.min_row_id, "_MAX_ROW_ID": self.max_row_id}

    @staticmethod
    def from_avro(d: dict[str, Any], unknown: ExtraFields = ()) -> ManifestFileMeta:
        extra = {k: v for k, v in d.items() if k not in MANIFEST_FILE_META_FIELDS}
        return ManifestFileMeta(d["_FILE_NAME"], d["_FILE_SIZE"], d["_NUM_ADDED_FILES"], d["_NUM_DELETED_FILES"],
                                SimpleStats.from_avro(d["_PARTITION_STATS"]), d["_SCHEMA_ID"],
                                d.get("_MIN_BUCKET"), d.get("_MAX_BUCKET"), d.get("_MIN_LEVEL"),
                                d.get("_MAX_LEVEL"), d.get("_MIN_ROW_ID"), d.get("_MAX_ROW_ID"), extra,
                                tuple(f for f in unknown if f[0] in extra))


def _row_id_range(entries: Sequence[ManifestEntry]) -> tuple[int | None, int | None]:
    """The row ids of the entries' files, or (None, None) unless every file has a first row id."""
    if not entries or any(e.file.first_row_id is None for e in entries):
        return None, None
    return (min(cast(int, e.file.first_row_id) for e in entries),
            max(cast(int, e.file.first_row_id) + e.file.row_count - 1 for e in entries))


def _union(definitions: Iterable[ExtraFields]) -> ExtraFields:
    """The unknown field definitions of several records, the first definition of each name."""
    by_name: dict[str, str] = {}
    for defs in definitions:
        for name, d in defs:
            by_name.setdefault(name, d)
    return tuple(sorted(by_name.items()))


def _encode_avro(schema: Any, records: Iterable[dict[str, Any]], codec: str) -> bytes:
    """An Avro file's bytes (written by `ManifestStore.upload`, content synced on a local disk; the directory is
    left to `ManifestStore.sync_dir`)."""
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec=CODECS.get(codec, codec))
    return buf.getvalue()


def _read_avro(fio: FileIO, path: str) -> tuple[list[dict[str, Any]], Any]:
    """The records of an Avro file and the schema it was written with."""
    data = fio.read_immutable(path)  # never rewritten under its name: a cached copy is the file
    try:
        reader = fastavro.reader(io.BytesIO(data))
        return list(cast(Iterable[dict[str, Any]], reader)), reader.writer_schema
    except Exception as e:  # fastavro raises several unrelated types on a broken file
        raise CorruptMetadataError(f"cannot read Avro file {path}: {e}") from None


class _Records:
    """A decoded manifest or manifest list; a manifest's entries also by partition, grouped on first use."""

    __slots__ = ("_by_partition", "records")

    def __init__(self, records: tuple[Any, ...]) -> None:
        self.records = records
        self._by_partition: dict[bytes, list[ManifestEntry]] | None = None

    def by_partition(self) -> dict[bytes, list[ManifestEntry]]:
        """The entries of each partition, in their order (a DELETE names its file's partition: replaying one
        partition's entries gives that partition's live files)."""
        groups = self._by_partition
        if groups is None:
            groups = {}
            for e in self.records:
                groups.setdefault(e.partition, []).append(e)
            self._by_partition = groups
        return groups


class _Decoded:
    """Decoded manifests and manifest lists by path, least recently used out past a budget of records.

    Both are immutable (a uuid names each): a writer, a planner or the catalog that reads the same table again
    decodes only what is new since, and a reader of a few partitions looks only at their entries. Shared by every
    table of the process; bounded so that it stays a cache (an entry takes about 1.5 KB).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._items: OrderedDict[str, _Records] = OrderedDict()
        self._size = 0
        # a forked child (Spark's workers) keeps what was decoded, with a lock no thread of its own holds
        os.register_at_fork(after_in_child=self._fresh_lock)

    def _fresh_lock(self) -> None:
        self._lock = threading.Lock()

    def get(self, path: str) -> _Records | None:
        with self._lock:
            got = self._items.get(path)
            if got is not None:
                self._items.move_to_end(path)
            return got

    def put(self, path: str, records: tuple[Any, ...]) -> _Records:
        item = _Records(records)
        if len(records) > self.budget:
            return item
        with self._lock:
            if path in self._items:
                return self._items[path]
            self._items[path] = item
            self._size += max(len(records), 1)
            while self._size > self.budget:
                _, old = self._items.popitem(last=False)
                self._size -= max(len(old.records), 1)
        return item

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0


#: decoded manifest entries and manifest file metas (a manifest list's records), at most this many kept: the
#: default holds the manifests of a table of 200,000 live files (about 300 MB at most)
def _cache_entries() -> int:
    raw = os.environ.get("LSMLAKE_MANIFEST_CACHE_ENTRIES", "200000")
    if not raw.strip().isdigit():
        raise InvalidInputError(f"LSMLAKE_MANIFEST_CACHE_ENTRIES must be a whole number of manifest entries (0: no "
                                f"cache), not {raw!r}")
    return int(raw)


DECODED = _Decoded(_cache_entries())


def partition_stats(partitions: Iterable[bytes], partition_types: Sequence[AnyType]) -> SimpleStats:
    """Min, max and null counts of each partition field over some serialized partition rows."""
    n = len(partition_types)
    mins: list[Any] = [None] * n
    maxs: list[Any] = [None] * n
    nulls = [0] * n
    for raw in set(partitions):
        values = deserialize_row(raw, partition_types)
        for i, v in enumerate(values):
            if v is None:
                nulls[i] += 1
                continue
            if isinstance(v, float) and v != v:
                continue  # NaN: unordered, it would make the bounds hold nothing; readers never prune on it
            if mins[i] is None or v < mins[i]:
                mins[i] = v
            if maxs[i] is None or v > maxs[i]:
                maxs[i] = v
    return SimpleStats(serialize_row(mins, partition_types), serialize_row(maxs, partition_types), tuple(nulls))


class ManifestStore:
    """Reads and writes the manifest files and manifest lists of one table."""

    def __init__(self, fio: FileIO, table_path: str, partition_types: Sequence[AnyType], codec: str = "zstd") -> None:
        self.io = fio
        self.dir = f"{table_path}/manifest"
        self.partition_types = list(partition_types)
        self.codec = codec
        self.cache: _Decoded | None = DECODED

    def uncached(self) -> ManifestStore:
        """The same store reading every file from storage, never from the decoded cache: for whoever must see a
        file that was deleted as missing (orphan cleanup, expiration)."""
        view = copy.copy(self)
        view.cache = None
        return view

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    def sync_dir(self) -> None:
        """Make the manifests written so far survive a power cut (their content is synced as written).

        Manifests, manifest lists and index manifests share the `manifest/` directory; a commit syncs it
        once, after writing all of them and before publishing the snapshot that names them.
        """
        self.io.sync_dir(self.dir)

    def write_manifest(self, entries: Sequence[ManifestEntry], schema_id: int,
                       decoded: bool = False) -> ManifestFileMeta:
        """Write one manifest file of these entries and describe it for a manifest list.

        `decoded`: the entries were read from manifests (a merge), so they are what reading this one gives: kept in
        the cache of decoded manifests, which spares the next reader decoding a merged manifest again.
        """
        meta, data = self.encode_manifest(entries, schema_id)
        self.upload(meta.file_name, data)
        if decoded and self.cache is not None:
            self.cache.put(self.path(meta.file_name), tuple(entries))
        return meta

    def upload(self, name: str, data: bytes) -> None:
        """Write an encoded manifest or manifest list (`encode_manifest`, `encode_list`) under its name."""
        self.io.write_immutable(self.path(name), data, sync_dir=False)  # a uuid names it: kept for the next read

    def encode_manifest(self, entries: Sequence[ManifestEntry], schema_id: int) -> tuple[ManifestFileMeta, bytes]:
        """The bytes of a manifest of these entries, and its description for a manifest list, before it is written
        (so that a list naming it can be written beside it)."""
        name = f"manifest-{uuid.uuid4()}-0"
        schema = manifest_entry_schema(_union(e.extra_fields for e in entries),
                                       _union(e.file.extra_fields for e in entries))
        data = _encode_avro(schema, (e.to_avro() for e in entries), self.codec)
        size = len(data)
        buckets = [e.bucket for e in entries]
        levels = [e.file.level for e in entries]
        min_row_id, max_row_id = _row_id_range(entries)
        return ManifestFileMeta(
            file_name=name, file_size=size,
            num_added_files=sum(1 for e in entries if e.kind == ADD),
            num_deleted_files=sum(1 for e in entries if e.kind == DELETE),
            partition_stats=partition_stats((e.partition for e in entries), self.partition_types),
            schema_id=max((e.file.schema_id for e in entries), default=schema_id),
            min_bucket=min(buckets, default=None), max_bucket=max(buckets, default=None),
            min_level=min(levels, default=None), max_level=max(levels, default=None),
            min_row_id=min_row_id, max_row_id=max_row_id), data

    def read_manifest(self, name: str) -> list[ManifestEntry]:
        return list(self._decoded_manifest(name).records)

    def _decoded_manifest(self, name: str) -> _Records:
        path = self.path(name)
        cached = self.cache.get(path) if self.cache is not None else None
        if cached is not None:
            return cached
        records, schema = _read_avro(self.io, path)
        unknown = extra_fields(unknown_fields(schema, MANIFEST_ENTRY_FIELDS))
        file_unknown = extra_fields(unknown_fields(schema, DATA_FILE_META_FIELDS, ("_FILE",)))
        entries = tuple(ManifestEntry.from_avro(r, unknown, file_unknown) for r in records)
        return self.cache.put(path, entries) if self.cache is not None else _Records(entries)

    def write_list(self, metas: Sequence[ManifestFileMeta]) -> tuple[str, int]:
        """Write a manifest list; returns its name and size."""
        name, data = self.encode_list(metas)
        self.upload(name, data)
        return name, len(data)

    def encode_list(self, metas: Sequence[ManifestFileMeta]) -> tuple[str, bytes]:
        """The name and bytes of a manifest list of `metas`, before it is written."""
        name = f"manifest-list-{uuid.uuid4()}-0"
        schema = manifest_file_meta_schema(_union(m.extra_fields for m in metas))
        return name, _encode_avro(schema, (m.to_avro() for m in metas), self.codec)

    def read_list(self, name: str) -> list[ManifestFileMeta]:
        path = self.path(name)
        cached = self.cache.get(path) if self.cache is not None else None
        if cached is not None:
            return list(cached.records)
        records, schema = _read_avro(self.io, path)
        unknown = extra_fields(unknown_fields(schema, MANIFEST_FILE_META_FIELDS))
        metas = [ManifestFileMeta.from_avro(r, unknown) for r in records]
        if self.cache is not None:
            self.cache.put(path, tuple(metas))
        return metas

    def snapshot_manifests(self, base_list: str, delta_list: str) -> list[ManifestFileMeta]:
        """The data manifests of a snapshot: its base list, then its delta list."""
        return self.read_list(base_list) + self.read_list(delta_list)

    def live(self, base_list: str, delta_list: str,
             wanted: ManifestFilter | None = None) -> dict[tuple[Any, ...], ManifestEntry]:
        """The live files of a snapshot: every entry of its manifests replayed in order.

        `wanted`: only the live files of some partitions or buckets; only the manifests whose statistics can hold
        them are opened (see `manifest_prune`).
        """
        return merge_entries(self.entries(self.snapshot_manifests(base_list, delta_list), wanted))

    def entries(self, metas: Iterable[ManifestFileMeta], wanted: ManifestFilter | None = None) -> list[ManifestEntry]:
        """The entries of these manifests in order; with `wanted`, only its entries, of the manifests that can
        hold them."""
        entries: list[ManifestEntry] = []
        for m in metas:
            if wanted is None:
                entries.extend(self.read_manifest(m.file_name))
                continue
            if not wanted.may_hold(m.partition_stats, m.min_bucket, m.max_bucket,
                                   m.num_added_files + m.num_deleted_files):
                continue
            self.opened(m.file_name)
            groups = self._decoded_manifest(m.file_name).by_partition()
            known = wanted.partitions()
            for p in (known if known is not None and len(known) < len(groups) else groups):
                group = groups.get(p)
                if group is not None and wanted.keeps_partition(p):
                    entries.extend(e for e in group if wanted.keeps(p, e.bucket))
        return entries

    def opened(self, name: str) -> None:
        """Called with each manifest a filtered read looks into (a hook for tests that count them)."""


def merge_entries(entries: Iterable[ManifestEntry]) -> dict[tuple[Any, ...], ManifestEntry]:
    """Replay ADD/DELETE entries in order; the live files, keyed by identifier, in insertion order."""
    live: dict[tuple[Any, ...], ManifestEntry] = {}
    for e in entries:
        ident = e.identifier
        if e.kind == ADD:
            live[ident] = e
        else:
            live.pop(ident, None)
    return live
