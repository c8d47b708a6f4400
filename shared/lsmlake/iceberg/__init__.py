"""Iceberg v2 metadata published beside a Paimon table, so Iceberg readers read the same Parquet data files."""

from __future__ import annotations

from collections.abc import Mapping

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
from lsmlake.iceberg.types import check_types


def check_iceberg(schema: TableSchema, options: Mapping[str, str]) -> None:
    """InvalidInputError when the Iceberg options' values are not supported or a column has no Iceberg v2 type that
    readers read back equal; changes nothing."""
    settings(options)
    check_types(schema)


__all__ = ["IcebergPublication", "check_iceberg", "current_metadata_location", "iceberg_enabled",
           "iceberg_metadata_dir", "publish_iceberg", "publish_iceberg_now", "retain_iceberg"]
