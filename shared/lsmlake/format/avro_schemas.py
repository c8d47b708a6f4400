"""Avro record schemas of Paimon's manifest files, manifest lists and index manifests.

Readers match fields by name, so the record names are ours; the field names, order, types and
nullability are Paimon's.
"""

from __future__ import annotations

from typing import Any

import fastavro


def _nullable(avro_type: Any) -> list[Any]:
    return ["null", avro_type]


def _stats(name: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [
        {"name": "_MIN_VALUES", "type": "bytes"},
        {"name": "_MAX_VALUES", "type": "bytes"},
        {"name": "_NULL_COUNTS", "type": _nullable({"type": "array", "items": ["null", "long"]}), "default": None},
    ]}


DATA_FILE_META = {"type": "record", "name": "DataFileMeta", "fields": [
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

MANIFEST_ENTRY = fastavro.parse_schema({"type": "record", "name": "ManifestEntry", "fields": [
    {"name": "_VERSION", "type": "int"},
    {"name": "_KIND", "type": "int"},
    {"name": "_PARTITION", "type": "bytes"},
    {"name": "_BUCKET", "type": "int"},
    {"name": "_TOTAL_BUCKETS", "type": "int"},
    {"name": "_FILE", "type": DATA_FILE_META},
]})

MANIFEST_FILE_META = fastavro.parse_schema({"type": "record", "name": "ManifestFileMeta", "fields": [
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
]})

# Avro codec names as fastavro spells them, by Paimon's `manifest.compression` value.
CODECS = {"zstd": "zstandard", "zstandard": "zstandard", "null": "null", "none": "null",
          "deflate": "deflate", "snappy": "snappy", "bzip2": "bzip2", "xz": "xz"}
