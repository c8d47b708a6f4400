"""The table matrix of the Spark tests, built with lsmlake's library, and the readers compared on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pypaimon import CatalogFactory

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from tests.support.values import norm_value

COLUMNS = "id BIGINT NOT NULL, v STRING, n INT, price DECIMAL(10, 2), ts TIMESTAMP(6), d DATE, dt STRING NOT NULL"


def batch(ids: list[int], tag: str, dt: str | list[str], kinds: list[str] | None = None) -> pa.Table:
    import datetime as dtm
    from decimal import Decimal

    dts = dt if isinstance(dt, list) else [dt] * len(ids)
    cols: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([f"{tag}{i}" if i % 7 else None for i in ids], pa.string()),
        "n": pa.array([i % 5 for i in ids], pa.int32()),
        "price": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
        "ts": pa.array([dtm.datetime(2024, 1, 1) + dtm.timedelta(seconds=i, microseconds=i) for i in ids],
                       pa.timestamp("us")),
        "d": pa.array([dtm.date(2024, 1, 1) + dtm.timedelta(days=i % 30) for i in ids], pa.date32()),
        "dt": pa.array(dts, pa.string()),
    }
    if kinds is not None:
        cols["_row_kind"] = pa.array(kinds, pa.string())
    return pa.table(cols)


def _history(t: FileStoreTable) -> None:
    """Three writes: inserts over two partitions, updates and deletes of some keys, more inserts."""
    t.write_arrow(batch(list(range(0, 60)), "a", ["p1" if i % 2 else "p2" for i in range(60)]))
    upd = list(range(0, 20, 2))
    t.write_arrow(batch(upd + [1, 3], "b", ["p2"] * len(upd) + ["p1", "p1"], ["+U"] * len(upd) + ["-D", "-D"]))
    t.write_arrow(batch(list(range(60, 80)), "c", "p3"))


def merge_on_read(cat: FileSystemCatalog) -> FileStoreTable:
    t = cat.create_table("db.mor", COLUMNS, partition_keys=["dt"], primary_keys=["dt", "id"], options={"bucket": "3"})
    _history(t)
    return t


def compacted(cat: FileSystemCatalog) -> FileStoreTable:
    t = cat.create_table("db.compacted", COLUMNS, partition_keys=["dt"], primary_keys=["dt", "id"],
                         options={"bucket": "3"})
    _history(t)
    compact_table(t, full=True)
    t.write_arrow(batch([2, 4, 100], "d", "p2"))  # level 0 on top of compacted files
    return t


def deletion_vectors(cat: FileSystemCatalog) -> FileStoreTable:
    t = cat.create_table("db.dv", COLUMNS, partition_keys=["dt"], primary_keys=["dt", "id"],
                         options={"bucket": "2", "deletion-vectors.enabled": "true"})
    _history(t)
    return t


def append_dv(cat: FileSystemCatalog) -> FileStoreTable:
    t = cat.create_table("db.append", COLUMNS, partition_keys=["dt"],
                         options={"bucket": "2", "bucket-key": "id", "deletion-vectors.enabled": "true"})
    t.write_arrow(batch(list(range(0, 40)), "a", ["p1" if i % 2 else "p2" for i in range(40)]))
    t.write_arrow(batch(list(range(40, 50)), "b", "p1"))
    t.delete_where([("n", "=", 3)])
    return t


def partial_update(cat: FileSystemCatalog) -> FileStoreTable:
    t = cat.create_table("db.partial", COLUMNS, partition_keys=["dt"], primary_keys=["dt", "id"],
                         options={"bucket": "2", "merge-engine": "partial-update"})
    t.write_arrow(batch(list(range(0, 30)), "a", "p1"))
    t.write_arrow(pa.table({"id": pa.array([1, 2, 7, 14], pa.int64()), "n": pa.array([90, None, 91, 92], pa.int32()),
                            "dt": ["p1"] * 4}))
    return t


MATRIX: dict[str, Callable[[FileSystemCatalog], FileStoreTable]] = {
    "merge_on_read": merge_on_read, "compacted": compacted, "deletion_vectors": deletion_vectors,
    "append_dv": append_dv, "partial_update": partial_update,
}

IDENTS = {"merge_on_read": "db.mor", "compacted": "db.compacted", "deletion_vectors": "db.dv",
          "append_dv": "db.append", "partial_update": "db.partial"}


def rows(table: pa.Table, columns: list[str] | None = None) -> list[tuple]:
    """The rows as a sorted list of canonical tuples (column order of `columns` or of the table)."""
    cols = columns or table.column_names
    return sorted((tuple(norm_value(r[c]) for c in cols) for r in table.to_pylist()), key=repr)


def spark_rows(df: Any, columns: list[str] | None = None) -> list[tuple]:
    return rows(df.toArrow(), columns)


def pypaimon_read(warehouse: str, ident: str, snapshot_id: int | None = None) -> pa.Table:
    pt = CatalogFactory.create({"warehouse": warehouse}).get_table(ident)
    if snapshot_id is not None:
        pt = pt.copy({"scan.snapshot-id": str(snapshot_id)})
    rb = pt.new_read_builder()
    return rb.new_read().to_arrow(rb.new_scan().plan().splits())
