"""Iceberg v2 manifests and manifest lists as Avro files (fastavro), with Iceberg's field ids in the Avro schema.

Column statistics are left out (optional in Iceberg): readers then read every file of a matching partition.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from lsmlake.format import types as t
from lsmlake.iceberg import partition_summary

DATA = 0
DELETES = 1
POSITION_DELETES = 1  # a data file's content
ADDED = 1
EXISTING = 0


@dataclass(frozen=True)
class IcebergFile:
    """One data or position-delete file as a manifest names it."""

    content: int  # 0 data, 1 position deletes
    path: str
    partition: tuple[Any, ...]  # Iceberg values of the partition fields
    record_count: int
    file_size: int
    snapshot_id: int  # the snapshot that added it
    sequence_number: int  # its data sequence number (that snapshot's)
    referenced: str | None = None  # the data file a position delete file applies to


@dataclass(frozen=True)
class ManifestMeta:
    """One manifest as a manifest list names it."""

    path: str
    length: int
    content: int
    sequence_number: int
    min_sequence_number: int
    added_snapshot_id: int
    added_files: int
    existing_files: int
    added_rows: int
    existing_rows: int
    partitions: list[dict[str, Any]] | None = None  # the summary of each partition field (`partition_summary`)


def _decimal_bytes(precision: int) -> int:
    """The fewest bytes whose two's complement holds every unscaled value of `precision` digits (Iceberg's size)."""
    n = 1
    while (1 << (8 * n - 1)) - 1 < 10 ** precision - 1:
        n += 1
    return n


def _avro_partition_type(ty: t.AnyType, field_id: int) -> Any:
    assert isinstance(ty, t.DataType)
    k = ty.kind
    if k == t.BOOLEAN:
        return "boolean"
    if k in (t.TINYINT, t.SMALLINT, t.INT):
        return "int"
    if k == t.BIGINT:
        return "long"
    if k == t.FLOAT:
        return "float"
    if k == t.DOUBLE:
        return "double"
    if k in t.STRING_KINDS:
        return "string"
    if k in t.BINARY_KINDS:
        return "bytes"
    if k == t.DATE:
        return {"type": "int", "logicalType": "date"}
    if k == t.DECIMAL:
        # Iceberg's Avro decimal is a fixed of the fewest bytes (readers refuse `bytes` decimals)
        return {"type": "fixed", "name": f"fixed_{field_id}", "size": _decimal_bytes(ty.precision),
                "logicalType": "decimal", "precision": ty.precision, "scale": ty.scale}
    if k in (t.TIMESTAMP, t.TIMESTAMP_LTZ):
        return {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": k == t.TIMESTAMP_LTZ}
    raise AssertionError(f"partition type {ty.sql()} was not checked")


def partition_struct(names: Sequence[str], types: Sequence[t.AnyType]) -> dict[str, Any]:
    """The Avro record of a partition tuple (Iceberg partition field ids from 1000)."""
    return {"type": "record", "name": "r102", "fields": [
        {"name": n, "type": ["null", _avro_partition_type(ty, 1000 + i)], "default": None, "field-id": 1000 + i}
        for i, (n, ty) in enumerate(zip(names, types, strict=True))]}


def _entry_schema(partition: dict[str, Any]) -> dict[str, Any]:
    def opt(name: str, ty: Any, fid: int) -> dict[str, Any]:
        return {"name": name, "type": ["null", ty], "default": None, "field-id": fid}

    data_file = {"type": "record", "name": "r2", "fields": [
        {"name": "content", "type": "int", "field-id": 134},
        {"name": "file_path", "type": "string", "field-id": 100},
        {"name": "file_format", "type": "string", "field-id": 101},
        {"name": "partition", "type": partition, "field-id": 102},
        {"name": "record_count", "type": "long", "field-id": 103},
        {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
        opt("referenced_data_file", "string", 143),
    ]}
    return {"type": "record", "name": "manifest_entry", "fields": [
        {"name": "status", "type": "int", "field-id": 0},
        opt("snapshot_id", "long", 1),
        opt("sequence_number", "long", 3),
        opt("file_sequence_number", "long", 4),
        {"name": "data_file", "type": data_file, "field-id": 2},
    ]}


_FIELD_SUMMARY = {"type": "record", "name": "r508", "fields": [
    {"name": "contains_null", "type": "boolean", "field-id": 509},
    {"name": "contains_nan", "type": ["null", "boolean"], "default": None, "field-id": 518},
    {"name": "lower_bound", "type": ["null", "bytes"], "default": None, "field-id": 510},
    {"name": "upper_bound", "type": ["null", "bytes"], "default": None, "field-id": 511}]}

MANIFEST_LIST_SCHEMA = {"type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string", "field-id": 500},
    {"name": "manifest_length", "type": "long", "field-id": 501},
    {"name": "partition_spec_id", "type": "int", "field-id": 502},
    {"name": "content", "type": "int", "field-id": 517},
    {"name": "sequence_number", "type": "long", "field-id": 515},
    {"name": "min_sequence_number", "type": "long", "field-id": 516},
    {"name": "added_snapshot_id", "type": "long", "field-id": 503},
    {"name": "added_files_count", "type": "int", "field-id": 504},
    {"name": "existing_files_count", "type": "int", "field-id": 505},
    {"name": "deleted_files_count", "type": "int", "field-id": 506},
    {"name": "added_rows_count", "type": "long", "field-id": 512},
    {"name": "existing_rows_count", "type": "long", "field-id": 513},
    {"name": "deleted_rows_count", "type": "long", "field-id": 514},
    {"name": "partitions", "type": ["null", {"type": "array", "items": _FIELD_SUMMARY, "element-id": 508}],
     "default": None, "field-id": 507},
]}


def encode_manifest(files: Sequence[IcebergFile], snapshot_id: int, partition: dict[str, Any], content: int,
                    iceberg_schema: dict[str, Any], spec: dict[str, Any], codec: str) -> bytes:
    """One manifest of `files`; those added by `snapshot_id` are ADDED, the others EXISTING."""
    names = [f["name"] for f in partition["fields"]]
    records = [{"status": ADDED if f.snapshot_id == snapshot_id else EXISTING, "snapshot_id": f.snapshot_id,
                "sequence_number": f.sequence_number, "file_sequence_number": f.sequence_number,
                "data_file": {"content": f.content, "file_path": f.path, "file_format": "PARQUET",
                              "partition": dict(zip(names, f.partition, strict=True)),
                              "record_count": f.record_count, "file_size_in_bytes": f.file_size,
                              "referenced_data_file": f.referenced}} for f in files]
    meta = {"schema": json.dumps(iceberg_schema), "schema-id": str(iceberg_schema["schema-id"]),
            "partition-spec": json.dumps(spec["fields"]), "partition-spec-id": str(spec["spec-id"]),
            "format-version": "2", "content": "deletes" if content == DELETES else "data"}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(_entry_schema(partition)), records, codec=codec, metadata=meta)
    return buf.getvalue()


def read_manifest(data: bytes) -> list[IcebergFile]:
    """The live (added or existing) files of a manifest this module wrote."""
    out = []
    for r in fastavro.reader(io.BytesIO(data)):
        assert isinstance(r, dict)
        if r["status"] == 2:
            continue
        d = r["data_file"]
        out.append(IcebergFile(d["content"], d["file_path"], tuple(d["partition"].values()), d["record_count"],
                               d["file_size_in_bytes"], r["snapshot_id"], r["sequence_number"],
                               d.get("referenced_data_file")))
    return out


def manifest_meta(path: str, length: int, content: int, files: Sequence[IcebergFile], snapshot_id: int,
                  sequence_number: int, partition_types: Sequence[t.AnyType]) -> ManifestMeta:
    added = [f for f in files if f.snapshot_id == snapshot_id]
    existing = [f for f in files if f.snapshot_id != snapshot_id]
    return ManifestMeta(path, length, content, sequence_number, min(f.sequence_number for f in files),
                        snapshot_id, len(added), len(existing), sum(f.record_count for f in added),
                        sum(f.record_count for f in existing),
                        partition_summary.summaries(partition_types, (f.partition for f in files)))


def encode_manifest_list(manifests: Sequence[ManifestMeta], snapshot_id: int, parent_id: int | None,
                         sequence_number: int, codec: str) -> bytes:
    records = [{"manifest_path": m.path, "manifest_length": m.length, "partition_spec_id": 0, "content": m.content,
                "sequence_number": m.sequence_number, "min_sequence_number": m.min_sequence_number,
                "added_snapshot_id": m.added_snapshot_id, "added_files_count": m.added_files,
                "existing_files_count": m.existing_files, "deleted_files_count": 0,
                "added_rows_count": m.added_rows, "existing_rows_count": m.existing_rows, "deleted_rows_count": 0,
                "partitions": m.partitions} for m in manifests]
    meta = {"snapshot-id": str(snapshot_id), "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
            "sequence-number": str(sequence_number), "format-version": "2"}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(MANIFEST_LIST_SCHEMA), records, codec=codec, metadata=meta)
    return buf.getvalue()


def read_manifest_list(data: bytes) -> list[ManifestMeta]:
    out = []
    for r in fastavro.reader(io.BytesIO(data)):
        assert isinstance(r, dict)
        out.append(ManifestMeta(r["manifest_path"], r["manifest_length"], r["content"], r["sequence_number"],
                                r["min_sequence_number"], r["added_snapshot_id"], r["added_files_count"],
                                r["existing_files_count"], r["added_rows_count"], r["existing_rows_count"],
                                r.get("partitions")))
    return out
