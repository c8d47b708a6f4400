"""The Iceberg v2 table metadata JSON: schemas, the partition spec, snapshots and their logs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lsmlake.format.schema import TableSchema
from lsmlake.iceberg.types import iceberg_schema, max_field_id, name_mapping

NAME_MAPPING = "schema.name-mapping.default"


@dataclass(frozen=True)
class IcebergSnapshot:
    """One Iceberg snapshot (its id and sequence number are the Paimon snapshot's id)."""

    snapshot_id: int
    parent_id: int | None
    time_ms: int
    manifest_list: str
    operation: str
    schema_id: int

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"snapshot-id": self.snapshot_id, "sequence-number": self.snapshot_id,
                             "timestamp-ms": self.time_ms, "manifest-list": self.manifest_list,
                             "summary": {"operation": self.operation}, "schema-id": self.schema_id}
        if self.parent_id is not None:
            d["parent-snapshot-id"] = self.parent_id
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> IcebergSnapshot:
        return IcebergSnapshot(d["snapshot-id"], d.get("parent-snapshot-id"), d["timestamp-ms"], d["manifest-list"],
                               d["summary"]["operation"], d["schema-id"])


def partition_spec(schema: TableSchema) -> dict[str, Any]:
    """Identity partition fields on Paimon's partition columns, ids from 1000."""
    return {"spec-id": 0, "fields": [{"name": k, "transform": "identity", "source-id": schema.field(k).id,
                                      "field-id": 1000 + i} for i, k in enumerate(schema.partition_keys)]}


def table_metadata(table_uuid: str, location: str, schemas: Sequence[TableSchema], current: TableSchema,
                   snapshots: Sequence[IcebergSnapshot], metadata_log: Sequence[dict[str, Any]],
                   properties: dict[str, str]) -> dict[str, Any]:
    """The metadata of a table whose current snapshot is the last of `snapshots`; `schemas`: every schema that
    `snapshots` name, and `current`."""
    spec = partition_spec(current)
    by_id = {s.id: s for s in schemas}
    by_id[current.id] = current
    ordered = [by_id[i] for i in sorted(by_id)]
    head = snapshots[-1]
    props = dict(properties)
    props[NAME_MAPPING] = json.dumps(name_mapping(ordered))
    return {
        "format-version": 2,
        "table-uuid": table_uuid,
        "location": location,
        "last-sequence-number": head.snapshot_id,
        "last-updated-ms": head.time_ms,
        "last-column-id": max_field_id(ordered),
        "current-schema-id": head.schema_id,
        "schemas": [iceberg_schema(s) for s in ordered],
        "default-spec-id": 0,
        "partition-specs": [spec],
        "last-partition-id": 999 + len(spec["fields"]),
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": props,
        "current-snapshot-id": head.snapshot_id,
        "refs": {"main": {"snapshot-id": head.snapshot_id, "type": "branch"}},
        "snapshots": [s.to_json() for s in snapshots],
        "snapshot-log": [{"timestamp-ms": s.time_ms, "snapshot-id": s.snapshot_id} for s in snapshots],
        "metadata-log": list(metadata_log),
    }


def snapshots_of(metadata: dict[str, Any]) -> list[IcebergSnapshot]:
    return sorted((IcebergSnapshot.from_json(d) for d in metadata.get("snapshots", [])), key=lambda s: s.snapshot_id)
