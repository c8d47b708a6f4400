"""Iceberg v2 metadata published beside a Paimon table, so Iceberg readers read the same Parquet data files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lsmlake.format.schema import TableSchema
from lsmlake.iceberg.options import iceberg_enabled, settings
from lsmlake.iceberg.publish import (
    IcebergPublication,
    current_metadata_location,
    iceberg_metadata_dir,
    publish_iceberg,
    publish_iceberg_now,
)
from lsmlake.iceberg.retain import retain_iceberg
from lsmlake.iceberg.types import check_types, name_mapping


def check_iceberg(schema: TableSchema, options: Mapping[str, str], earlier: Sequence[TableSchema] = ()) -> None:
    """InvalidInputError when the Iceberg options' values are not supported, a column has no Iceberg v2 type that
    readers read back equal, or a name stood for two columns over `earlier` and `schema`; changes nothing."""
    settings(options)
    check_types(schema)
    name_mapping([*earlier, schema])


__all__ = ["IcebergPublication", "check_iceberg", "current_metadata_location", "iceberg_enabled",
           "iceberg_metadata_dir", "publish_iceberg", "publish_iceberg_now", "retain_iceberg"]
