"""Index manifests: the complete set of live index files (deletion vectors, hash indexes) of a snapshot."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import fastavro
from pyroaring import BitMap

from lsmlake.format import deletion_vector
from lsmlake.format.avro_schemas import CODECS
from lsmlake.format.deletion_vector import DvRange
from lsmlake.fs.file_io import FileIO

DELETION_VECTORS = "DELETION_VECTORS"
#: the dynamic-bucket index: a bucket's key hashes
HASH_INDEX = "HASH"

INDEX_MANIFEST_ENTRY = fastavro.parse_schema({"type": "record", "name": "IndexManifestEntry", "fields": [
    {"name": "_VERSION", "type": "int"},
    {"name": "_KIND", "type": "int"},
    {"name": "_PARTITION", "type": "bytes"},
    {"name": "_BUCKET", "type": "int"},
    {"name": "_INDEX_TYPE", "type": "string"},
    {"name": "_FILE_NAME", "type": "string"},
    {"name": "_FILE_SIZE", "type": "long"},
    {"name": "_ROW_COUNT", "type": "long"},
    {"name": "_DELETIONS_VECTORS_RANGES", "default": None, "type": ["null", {"type": "array", "items": {
        "type": "record", "name": "DeletionVectorMeta", "fields": [
            {"name": "f0", "type": "string"}, {"name": "f1", "type": "int"}, {"name": "f2", "type": "int"},
            {"name": "_CARDINALITY", "type": ["null", "long"], "default": None}]}}]},
    {"name": "_EXTERNAL_PATH", "type": ["null", "string"], "default": None},
    {"name": "_GLOBAL_INDEX", "default": None, "type": ["null", {"type": "record", "name": "GlobalIndexMeta",
                                                                  "fields": [
        {"name": "_ROW_RANGE_START", "type": "long"}, {"name": "_ROW_RANGE_END", "type": "long"},
        {"name": "_INDEX_FIELD_ID", "type": "int"},
        {"name": "_EXTRA_FIELD_IDS", "type": ["null", {"type": "array", "items": "int"}], "default": None},
        {"name": "_INDEX_META", "type": ["null", "bytes"], "default": None},
        {"name": "_SOURCE_META", "type": ["null", "bytes"], "default": None}]}]},
]})


@dataclass(frozen=True)
class IndexEntry:
    """One live index file of a (partition, bucket)."""

    partition: bytes
    bucket: int
    index_type: str
    file_name: str
    file_size: int
    row_count: int
    dv_ranges: tuple[DvRange, ...] | None = None
    external_path: str | None = None
    global_index: dict[str, Any] | None = None

    def to_avro(self) -> dict[str, Any]:
        ranges = None if self.dv_ranges is None else [
            {"f0": r.file_name, "f1": r.offset, "f2": r.length, "_CARDINALITY": r.cardinality} for r in self.dv_ranges]
        return {"_VERSION": 1, "_KIND": 0, "_PARTITION": self.partition, "_BUCKET": self.bucket,
                "_INDEX_TYPE": self.index_type, "_FILE_NAME": self.file_name, "_FILE_SIZE": self.file_size,
                "_ROW_COUNT": self.row_count, "_DELETIONS_VECTORS_RANGES": ranges,
                "_EXTERNAL_PATH": self.external_path, "_GLOBAL_INDEX": self.global_index}

    @staticmethod
    def from_avro(d: dict[str, Any]) -> IndexEntry:
        ranges = d.get("_DELETIONS_VECTORS_RANGES")
        return IndexEntry(d["_PARTITION"], d["_BUCKET"], d["_INDEX_TYPE"], d["_FILE_NAME"], d["_FILE_SIZE"],
                          d["_ROW_COUNT"],
                          None if ranges is None else tuple(DvRange(r["f0"], r["f1"], r["f2"], r.get("_CARDINALITY"))
                                                            for r in ranges),
                          d.get("_EXTERNAL_PATH"), d.get("_GLOBAL_INDEX"))


class IndexManifestStore:
    """Reads and writes index manifests and index files of one table."""

    def __init__(self, fio: FileIO, table_path: str, codec: str = "zstd") -> None:
        self.io = fio
        self.table_path = table_path
        self.codec = codec

    def manifest_path(self, name: str) -> str:
        return f"{self.table_path}/manifest/{name}"

    def index_path(self, name: str) -> str:
        return f"{self.table_path}/index/{name}"

    def read(self, name: str | None) -> list[IndexEntry]:
        if not name:
            return []
        data = self.io.read_immutable(self.manifest_path(name))  # a uuid names it: never rewritten
        records = cast(Iterable[dict[str, Any]], fastavro.reader(io.BytesIO(data)))
        return [IndexEntry.from_avro(r) for r in records if r["_KIND"] == 0]

    def write(self, entries: Sequence[IndexEntry]) -> str:
        """Write an index manifest; the commit syncs the `manifest/` directory with its other manifests."""
        name = f"index-manifest-{uuid.uuid4()}-0"
        buf = io.BytesIO()
        fastavro.writer(buf, INDEX_MANIFEST_ENTRY, [e.to_avro() for e in entries],
                        codec=CODECS.get(self.codec, self.codec))
        self.io.write_immutable(self.manifest_path(name), buf.getvalue(), sync_dir=False)
        return name

    def write_index_file(self, data: bytes) -> str:
        """Write an index file (deletion vectors), synced with its directory: one file per bucket and commit."""
        name = f"index-{uuid.uuid4()}-0"
        self.io.write_bytes(self.index_path(name), data)
        return name


class BucketVectors(Protocol):
    """Where a bucket's deletion vectors are: its partition, bucket and current index file (a scan's split)."""

    @property
    def partition(self) -> bytes: ...
    @property
    def bucket(self) -> int: ...
    @property
    def dv_index(self) -> IndexEntry | None: ...


def dv_index_change(indexes: IndexManifestStore, split: BucketVectors,
                    vectors: dict[str, BitMap]) -> tuple[list[IndexEntry], list[IndexEntry]]:
    """(added, removed) index entries that replace a bucket's deletion-vector file by `vectors`."""
    removed = [split.dv_index] if split.dv_index is not None else []
    live = {name: bm for name, bm in vectors.items() if len(bm)}
    if not live:
        return [], removed
    data, ranges = deletion_vector.serialize(live)
    name = indexes.write_index_file(data)
    entry = IndexEntry(split.partition, split.bucket, DELETION_VECTORS, name, len(data), len(ranges), tuple(ranges))
    return [entry], removed
