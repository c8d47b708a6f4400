"""The results users and the CLI get from writes and compactions print short: counts, not file lists."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.types import parse_schema_fields
from lsmlake.table.compact import compact_table
from lsmlake.table.write import TableWrite


def test_reprs_name_counts_not_files(tmp_path: Path) -> None:
    catalog = FileSystemCatalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.t", parse_schema_fields("id BIGINT NOT NULL, v STRING"), [], ["id"],
                                 {"bucket": "2"})
    for start in (0, 50, 100):
        table.write_arrow(pa.table({"id": pa.array(range(start, start + 100), pa.int64()), "v": ["x"] * 100}))
    w = table.new_write()
    assert isinstance(w, TableWrite)
    w.write(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["y"] * 3}))
    assert repr(w) == f"TableWrite({table.path}, files_written=2)"
    w.abort()
    result = compact_table(table, full=True)
    assert repr(result) == (f"TableCompactResult(snapshot_id={result.snapshot_id}, buckets=2, files_before=6, "
                            "files_after=2)")
    assert result.files_before == 6 and result.messages[0].deleted_files[0].file_name not in repr(result)


def test_a_commit_message_names_counts(tmp_path: Path) -> None:
    catalog = FileSystemCatalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.t", parse_schema_fields("id BIGINT NOT NULL, v STRING"), [], ["id"],
                                 {"bucket": "1"})
    w = table.new_write()
    w.write(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["y"] * 3}))
    [message] = w.prepare_commit()
    assert repr(message) == f"CommitMessage(partition={message.partition.hex()}, bucket=0, new_files=1)"
    assert message.new_files[0].file_name not in repr(message)
