"""A commit on an object store uploads an append's delta manifest and list while it looks up the latest snapshot:
when that look (or anything else before publication) fails, the uploads are removed again, so a failing writer
that retries leaves no unreferenced metadata behind."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.snapshot import SnapshotManager
from tests.support.s3_server import S3Server


def _manifest_dir_names(table: Any) -> set[str]:
    return {i.name for i in table.io.list(f"{table.path}/manifest")}


@pytest.mark.parametrize("failure", [OSError("connection reset by peer"), KeyError("odd answer")])
def test_a_failed_look_at_the_latest_snapshot_leaves_no_uploads(s3_server: S3Server, monkeypatch: Any,
                                                                 failure: Exception) -> None:
    cat = FileSystemCatalog(s3_server.warehouse())
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(pa.table({"k": pa.array([1], pa.int64()), "v": ["a"]}))
    before = _manifest_dir_names(t)
    write = t.new_write()
    write.write(pa.table({"k": pa.array([2], pa.int64()), "v": ["b"]}))
    messages = write.prepare_commit()

    def failing(self: SnapshotManager) -> None:
        raise failure

    monkeypatch.setattr(SnapshotManager, "latest", failing)
    with pytest.raises(type(failure)):
        t.new_commit().commit(messages)
    monkeypatch.undo()
    assert _manifest_dir_names(t) == before
    assert cat.get_table("db.t").to_arrow().num_rows == 1
