"""lsmlake's Parquet files carry no field ids, so Iceberg readers find a file's columns by the names the name mapping
lists for each field id; a name that belonged to one column and then to another cannot be told apart in the files
(pyiceberg read the new column's values into the renamed one, DuckDB the old ones into the new). Such a schema is
refused for a table that publishes Iceberg metadata, and a publication of a table with that history says why."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.iceberg import current_metadata_location, publish_iceberg_now
from lsmlake.table.schema_change import AddColumn, RenameColumn


def _table(tmp_path: Path, options: dict[str, str]) -> tuple[FileSystemCatalog, str]:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", options=options)
    t.write_arrow(pa.table({"k": pa.array([1], pa.int32()), "v": ["old-v"]}))
    return cat, "db.t"


def test_a_name_given_to_another_column_is_refused_with_the_option(tmp_path: Path) -> None:
    cat, tid = _table(tmp_path, {"metadata.iceberg.storage": "table-location"})
    cat.alter_table(tid, [RenameColumn("v", "x")])
    schema_before = cat.get_table(tid).schema
    with pytest.raises(InvalidInputError, match="`v`.*Iceberg"):
        cat.alter_table(tid, [AddColumn("v", "STRING")])
    assert cat.get_table(tid).schema == schema_before  # nothing changed
    cat.alter_table(tid, [AddColumn("v2", "STRING")])  # a fresh name is fine


def test_a_publication_of_such_a_history_is_refused_naming_the_column(tmp_path: Path) -> None:
    cat, tid = _table(tmp_path, {})
    cat.alter_table(tid, [RenameColumn("v", "x")])
    cat.alter_table(tid, [AddColumn("v", "STRING")])
    table = cat.get_table(tid)
    table.write_arrow(pa.table({"k": pa.array([2], pa.int32()), "x": ["new-x"], "v": ["new-v"]}))
    with pytest.raises(InvalidInputError, match="`v`.*Iceberg"):
        publish_iceberg_now(table)
    assert current_metadata_location(table) is None
