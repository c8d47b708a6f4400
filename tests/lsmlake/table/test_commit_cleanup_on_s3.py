"""A commit on an object store uploads an append's delta manifest and list while it looks up the latest snapshot,
and a one-call write its base manifest list while the rows are written: when that look (or anything else before
publication) fails, or the commit lands on another snapshot than the base list was built on, or is never made, the
uploads are removed again, so a failing writer that retries leaves no unreferenced metadata behind."""

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

    def failing(self: SnapshotManager, trust_look_within_s: float = 0.0) -> None:
        raise failure

    monkeypatch.setattr(SnapshotManager, "latest", failing)
    with pytest.raises(type(failure)):
        t.new_commit().commit(messages)
    monkeypatch.undo()
    assert _manifest_dir_names(t) == before
    assert cat.get_table("db.t").to_arrow().num_rows == 1


def _referenced(table: Any) -> set[str]:
    """The manifest folder's files that some snapshot names (its lists and the manifests in them)."""
    names: set[str] = set()
    for snap in table.snapshots.snapshots():
        for listed in (snap.base_manifest_list, snap.delta_manifest_list):
            names.add(listed)
            names |= {m.file_name for m in table.manifests.read_list(listed)}
    return names


def _one_row_table(s3_server: S3Server) -> tuple[str, Any]:
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(pa.table({"k": pa.array([1], pa.int64()), "v": ["a"]}))
    return wh, t


def test_a_base_list_built_ahead_is_taken_by_the_commit_that_lands_on_its_snapshot(s3_server: S3Server) -> None:
    _, t = _one_row_table(s3_server)
    t.write_arrow(pa.table({"k": pa.array([2], pa.int64()), "v": ["b"]}))
    assert _manifest_dir_names(t) == _referenced(t)  # nothing built ahead left over
    assert t.to_arrow().num_rows == 2


def test_a_base_list_built_on_a_snapshot_the_commit_does_not_land_on_is_deleted(s3_server: S3Server) -> None:
    wh, t = _one_row_table(s3_server)
    w = t.new_write()
    commit = t.new_commit()
    commit.build_base_ahead()  # on snapshot 1
    w.write(pa.table({"k": pa.array([2], pa.int64()), "v": ["b"]}))
    messages = w.prepare_commit()
    FileSystemCatalog(wh).get_table("db.t").write_arrow(pa.table({"k": pa.array([3], pa.int64()), "v": ["c"]}))
    assert commit.commit(messages).snapshot_id == 3  # lands on snapshot 2, with a base list built then
    assert _manifest_dir_names(t) == _referenced(t)
    assert sorted(FileSystemCatalog(wh).get_table("db.t").to_arrow().column("k").to_pylist()) == [1, 2, 3]


def test_a_base_list_built_for_a_commit_never_made_is_deleted(s3_server: S3Server) -> None:
    _, t = _one_row_table(s3_server)
    before = _manifest_dir_names(t)
    with pytest.raises(ValueError, match="refused"):
        t.write_arrow(_refused_rows())  # the write fails after the base list was built
    assert _manifest_dir_names(t) == before
    commit = t.new_commit()
    commit.build_base_ahead()
    commit.discard_base_ahead()
    assert _manifest_dir_names(t) == before


def _refused_rows() -> Any:
    def batches() -> Any:
        yield pa.table({"k": pa.array([5], pa.int64()), "v": ["e"]})
        raise ValueError("refused by the caller's input")
    return batches()
