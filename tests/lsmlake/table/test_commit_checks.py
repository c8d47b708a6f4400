"""A commit made without the catalog service (a Spark job on a warehouse folder) is checked as the service
checks one: a file change that names a file that is not there, a file outside the table's roots or a level
the table does not have is refused, and nothing is published."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import CommitMessage

Bad = Callable[[DataFileMeta, Path], DataFileMeta]

BAD_FILES: dict[str, tuple[Bad, str]] = {
    "never written": (lambda f, _: dataclasses.replace(f, file_name="data-never-written-0.parquet"), "does not exist"),
    "wrong size": (lambda f, _: dataclasses.replace(f, file_size=f.file_size + 1), "bytes, not the"),
    "outside the table": (lambda f, tmp: dataclasses.replace(f, external_path=str(tmp / "elsewhere.parquet")),
                          "external"),
    "no such level": (lambda f, _: dataclasses.replace(f, level=99), "level 99 is outside"),
}


def _table(tmp_path: Path) -> tuple[FileSystemCatalog, FileStoreTable]:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    return cat, cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})


def _bad_messages(table: FileStoreTable, tmp_path: Path, bad: Bad) -> list[CommitMessage]:
    w = table.new_write()
    w.write(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    (msg,) = w.prepare_commit()
    (tmp_path / "elsewhere.parquet").write_bytes(b"x" * msg.new_files[0].file_size)
    return [dataclasses.replace(msg, new_files=[bad(msg.new_files[0], tmp_path)])]


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_catalog_commit_without_the_service_refuses_a_bad_file_change(tmp_path: Path, case: str) -> None:
    bad, words = BAD_FILES[case]
    cat, table = _table(tmp_path)
    messages = _bad_messages(table, tmp_path, bad)
    for overwrite in (False, True):
        with pytest.raises(InvalidInputError, match=words):
            cat.commit(table, messages, overwrite=overwrite, partitions=None)
    assert table.snapshots.latest_id() is None


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_spark_write_to_a_warehouse_refuses_a_bad_file_change(tmp_path: Path, case: str) -> None:
    """Old code: `WarehouseAccess.commit` committed straight through `FileStoreCommit`, unchecked, and
    published a snapshot naming a missing file (or a file the table does not own)."""
    from lsmlake.spark.access import WarehouseAccess

    bad, words = BAD_FILES[case]
    _, table = _table(tmp_path)
    messages = _bad_messages(table, tmp_path, bad)
    access = WarehouseAccess(str(tmp_path / "wh"), "db.t")
    for overwrite in (False, True):
        with pytest.raises(InvalidInputError, match=words):
            access.commit(messages, overwrite)
    assert table.snapshots.latest_id() is None


def test_a_good_library_commit_still_lands(tmp_path: Path) -> None:
    cat, table = _table(tmp_path)
    w = table.new_write()
    w.write(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    messages = w.prepare_commit()
    assert all(os.path.exists(f"{table.path}/bucket-0/{f.file_name}") for m in messages for f in m.new_files)
    result = cat.commit(table, messages)
    assert result.snapshot_id == 1 and not result.already_committed
    assert sorted(r["k"] for r in table.to_arrow().to_pylist()) == [1, 2]


def test_an_index_file_with_an_external_path_is_refused(tmp_path: Path) -> None:
    """lsmlake keeps index files in the table's `index/` folder: an index entry naming a file elsewhere (`/dev/zero`
    as a HASH file, say, which the catalog would read without end) is refused before anything is read."""
    from lsmlake.format.index_manifest import HASH_INDEX, IndexEntry

    cat, table = _table(tmp_path)
    w = table.new_write()
    w.write(pa.table({"k": [1], "v": ["a"]}))
    (msg,) = w.prepare_commit()
    entry = IndexEntry(msg.partition, msg.bucket, HASH_INDEX, "index-x-0", 0, 0, external_path="/dev/zero")
    with pytest.raises(InvalidInputError, match="external path"):
        cat.commit(table, [dataclasses.replace(msg, new_index_files=[entry])], overwrite=False, partitions=None)
    assert table.snapshots.latest_id() is None
