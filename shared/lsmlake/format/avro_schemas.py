"""Avro record schemas of Paimon's manifest files, manifest lists and index manifests.

Readers match fields by name, so the record names are ours; the field names, order, types and
nullability are Paimon's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, cast

import fastavro
from fastavro.schema import expand_schema


def _nullable(avro_type: Any) -> list[Any]:
    return ["null", avro_type]


def _stats(name: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [
        {"name": "_MIN_VALUES", "type": "bytes"},
        {"name": "_MAX_VALUES", "type": "bytes"},
        {"name": "_NULL_COUNTS", "type": _nullable({"type": "array", "items": ["null", "long"]}), "default": None},
    ]}


DATA_FILE_META: dict[str, Any] = {"type": "record", "name": "DataFileMeta", "fields": [
    {"name": "_FILE_NAME", "type": "string"},
    {"name": "_FILE_SIZE", "type": "long"},
    {"name": "_ROW_COUNT", "type": "long"},
    {"name": "_MIN_KEY", "type": "bytes"},
    {"name": "_MAX_KEY", "type": "bytes"},
    {"name": "_KEY_STATS", "type": _stats("KeyStats")},
    {"name": "_VALUE_STATS", "type": _stats("ValueStats")},
    {"name": "_MIN_SEQUENCE_NUMBER", "type": "long"},
    {"name": "_MAX_SEQUENCE_NUMBER", "type": "long"},
    {"name": "_SCHEMA_ID", "type": "long"},
    {"name": "_LEVEL", "type": "int"},
    {"name": "_EXTRA_FILES", "type": {"type": "array", "items": "string"}},
    {"name": "_CREATION_TIME", "type": _nullable({"type": "long", "logicalType": "timestamp-millis"}),
     "default": None},
    {"name": "_DELETE_ROW_COUNT", "type": _nullable("long"), "default": None},
    {"name": "_EMBEDDED_FILE_INDEX", "type": _nullable("bytes"), "default": None},
    {"name": "_FILE_SOURCE", "type": _nullable("int"), "default": None},
    {"name": "_VALUE_STATS_COLS", "type": _nullable({"type": "array", "items": "string"}), "default": None},
    {"name": "_EXTERNAL_PATH", "type": _nullable("string"), "default": None},
    {"name": "_FIRST_ROW_ID", "type": _nullable("long"), "default": None},
    {"name": "_WRITE_COLS", "type": _nullable({"type": "array", "items": "string"}), "default": None},
    {"name": "_WRITE_COLS_SEQUENCES", "type": _nullable({"type": "array", "items": "long"}), "default": None},
]}

_MANIFEST_ENTRY: dict[str, Any] = {"type": "record", "name": "ManifestEntry", "fields": [
    {"name": "_VERSION", "type": "int"},
    {"name": "_KIND", "type": "int"},
    {"name": "_PARTITION", "type": "bytes"},
    {"name": "_BUCKET", "type": "int"},
    {"name": "_TOTAL_BUCKETS", "type": "int"},
    {"name": "_FILE", "type": DATA_FILE_META},
]}
MANIFEST_ENTRY = fastavro.parse_schema(_MANIFEST_ENTRY)

_MANIFEST_FILE_META: dict[str, Any] = {"type": "record", "name": "ManifestFileMeta", "fields": [
    {"name": "_VERSION", "type": "int"},
    {"name": "_FILE_NAME", "type": "string"},
    {"name": "_FILE_SIZE", "type": "long"},
    {"name": "_NUM_ADDED_FILES", "type": "long"},
    {"name": "_NUM_DELETED_FILES", "type": "long"},
    {"name": "_PARTITION_STATS", "type": _stats("PartitionStats")},
    {"name": "_SCHEMA_ID", "type": "long"},
    {"name": "_MIN_BUCKET", "type": _nullable("int"), "default": None},
    {"name": "_MAX_BUCKET", "type": _nullable("int"), "default": None},
    {"name": "_MIN_LEVEL", "type": _nullable("int"), "default": None},
    {"name": "_MAX_LEVEL", "type": _nullable("int"), "default": None},
    {"name": "_MIN_ROW_ID", "type": _nullable("long"), "default": None},
    {"name": "_MAX_ROW_ID", "type": _nullable("long"), "default": None},
]}
MANIFEST_FILE_META = fastavro.parse_schema(_MANIFEST_FILE_META)

DATA_FILE_META_FIELDS = frozenset(f["name"] for f in DATA_FILE_META["fields"])
MANIFEST_ENTRY_FIELDS = frozenset(f["name"] for f in _MANIFEST_ENTRY["fields"])
MANIFEST_FILE_META_FIELDS = frozenset(f["name"] for f in _MANIFEST_FILE_META["fields"])

# Fields a newer Paimon may add to these records are carried through a rewrite: a reader keeps each unknown
# field's value and its definition as the file declared it (`unknown_fields`), and the writer appends those
# definitions to the record (`manifest_entry_schema`, `manifest_file_meta_schema`). Readers match by name.
ExtraFields = tuple[tuple[str, str], ...]  # (field name, its Avro field definition as JSON), sorted by name


def unknown_fields(writer_schema: Any, known: frozenset[str], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """The field definitions of a record in a file's writer schema that `known` lacks, with named types inlined;
    `path` names the record-typed fields leading to the record (`("_FILE",)` for a manifest entry's file)."""
    record: dict[str, Any] = cast(dict[str, Any], expand_schema(writer_schema))
    for name in path:
        (f,) = [f for f in record["fields"] if f["name"] == name]
        record = next(t for t in (f["type"] if isinstance(f["type"], list) else [f["type"]])
                      if isinstance(t, dict) and t.get("type") == "record")
    return {f["name"]: _without_aliases(f) for f in record["fields"] if f["name"] not in known}


def extra_fields(definitions: Mapping[str, Any]) -> ExtraFields:
    """Unknown field definitions as a hashable value (what the schema builders below take)."""
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in definitions.items()))


def _without_aliases(f: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in f.items() if k in ("name", "type", "default", "doc")}


def _with_fields(record: dict[str, Any], extra: ExtraFields) -> dict[str, Any]:
    return {**record, "fields": list(record["fields"]) + [json.loads(d) for _, d in extra]}


def _named_once(schema: Any, seen: set[str]) -> Any:
    """`schema` with every named type defined once: a repeated definition becomes a reference to its name."""
    if isinstance(schema, list):
        return [_named_once(t, seen) for t in schema]
    if not isinstance(schema, dict):
        return schema
    name = schema.get("name") if schema.get("type") in ("record", "enum", "fixed") else None
    if name is not None:
        if name in seen:
            return name
        seen.add(name)
    out = dict(schema)
    if schema.get("type") == "record":
        out["fields"] = [{**f, "type": _named_once(f["type"], seen)} for f in schema["fields"]]
    for key in ("items", "values"):
        if key in schema:
            out[key] = _named_once(schema[key], seen)
    return out


@lru_cache(maxsize=64)
def manifest_entry_schema(entry_extra: ExtraFields = (), file_extra: ExtraFields = ()) -> Any:
    """The manifest-entry schema with unknown entry-level and `_FILE`-level fields appended."""
    if not entry_extra and not file_extra:
        return MANIFEST_ENTRY
    file_record = _with_fields(DATA_FILE_META, file_extra)
    entry_fields: list[dict[str, Any]] = _MANIFEST_ENTRY["fields"]
    fields = [f if f["name"] != "_FILE" else {**f, "type": file_record} for f in entry_fields]
    return fastavro.parse_schema(_named_once(_with_fields({**_MANIFEST_ENTRY, "fields": fields}, entry_extra), set()))


@lru_cache(maxsize=64)
def manifest_file_meta_schema(extra: ExtraFields = ()) -> Any:
    """The manifest-list record schema with unknown fields appended."""
    if not extra:
        return MANIFEST_FILE_META
    return fastavro.parse_schema(_named_once(_with_fields(_MANIFEST_FILE_META, extra), set()))

# Avro codec names as fastavro spells them, by Paimon's `manifest.compression` value.
CODECS = {"zstd": "zstandard", "zstandard": "zstandard", "null": "null", "none": "null",
          "deflate": "deflate", "snappy": "snappy", "bzip2": "bzip2", "xz": "xz"}
