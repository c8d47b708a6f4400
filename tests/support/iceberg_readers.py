"""The Iceberg readers the tests compare with lsmlake's own read: pyiceberg and DuckDB's iceberg extension."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.table import StaticTable

from lsmlake.iceberg.duckdb_reader import duckdb_iceberg_connection


def pyiceberg_read(metadata_location: str, snapshot_id: int | None = None,
                   properties: dict[str, str] | None = None) -> pa.Table:
    table = StaticTable.from_metadata(metadata_location, properties or {})
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def duckdb_read(metadata_location: str, snapshot_id: int | None = None) -> pa.Table:
    con = duckdb_iceberg_connection()
    at = "" if snapshot_id is None else f", snapshot_from_id={int(snapshot_id)}"
    return con.sql(f"SELECT * FROM iceberg_scan('{metadata_location}'{at})").arrow().read_all()


def rows(table: pa.Table, key: str) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r[key])
