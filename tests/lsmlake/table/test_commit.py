"""Commits: COMPACT replacement, conflicts, idempotent retries, file metadata and rolling."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitConflictError
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.data_file_meta import FILE_SOURCE_COMPACT
from lsmlake.format.data_file_writer import DataFileWriter, bucket_dir
from lsmlake.format.schema import SEQUENCE_NUMBER, VALUE_KIND
from lsmlake.format.snapshot import COMPACT
from lsmlake.table.write import CommitMessage


def _table(tmp_path, **options):
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    o = {"bucket": "1"}
    o.update(options)
    return cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options=o)


def _compact(t, split):
    """A full compaction of one split by hand: merged rows rewritten into one max-level file."""
    rows = t.new_read().read_split(split)
    seq = pa.array([max(f.max_sequence_number for f in split.files)] * rows.num_rows, pa.int64()).to_numpy()
    kinds = pa.array([0] * rows.num_rows, pa.int8()).to_numpy()
    files = DataFileWriter(t.io, t.schema).write(bucket_dir(t.path, "", split.bucket), rows.sort_by("k"), seq, kinds,
                                                 level=5, file_source=FILE_SOURCE_COMPACT)
    return CommitMessage(split.partition, split.bucket, split.total_buckets, new_files=files,
                         deleted_files=list(split.files))


def test_compact_commit_replaces_files_and_keeps_rows(tmp_path) -> None:
    t = _table(tmp_path)
    t.write_arrow(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}))
    t.write_arrow(pa.table({"k": [2, 3], "v": ["b2", None], "_row_kind": ["+U", "-D"]}))
    before = t.to_arrow().to_pylist()
    (split,) = t.plan()
    msg = _compact(t, split)
    res = t.new_commit().commit([msg])
    snap = t.snapshots.snapshot(res.snapshot_id)
    assert snap.commit_kind == COMPACT
    (after_split,) = t.plan()
    assert [f.level for f in after_split.files] == [5]
    assert after_split.raw_convertible
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"]) == sorted(before, key=lambda r: r["k"])
    assert snap.total_record_count == 2
    # A later append continues the bucket's sequence numbers and overrides the compacted row.
    t.write_arrow(pa.table({"k": [1], "v": ["a3"]}))
    assert sorted((r["k"], r["v"]) for r in t.to_arrow().to_pylist()) == [(1, "a3"), (2, "b2")]


def test_compaction_of_gone_files_conflicts_and_changes_nothing(tmp_path) -> None:
    t = _table(tmp_path)
    t.write_arrow(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    (split,) = t.plan()
    first, second = _compact(t, split), _compact(t, split)
    t.new_commit().commit([first])
    ids = t.snapshots.ids()
    with pytest.raises(CommitConflictError, match="no longer live"):
        t.new_commit().commit([second])
    assert t.snapshots.ids() == ids


def test_retried_commit_with_the_same_identifier_lands_once(tmp_path) -> None:
    t = _table(tmp_path)
    w = t.new_write()
    w.write(pa.table({"k": [1], "v": ["a"]}))
    msgs = w.prepare_commit()
    c = t.new_commit("user-1")
    r1 = c.commit(msgs, identifier=7)
    r2 = c.commit(msgs, identifier=7)  # the reply of r1 was "lost": the caller retries
    assert r2.already_committed and r2.snapshot_id == r1.snapshot_id
    assert t.snapshots.ids() == [1]
    assert t.to_arrow().num_rows == 1


def test_file_metadata_matches_the_file(tmp_path) -> None:
    t = _table(tmp_path)
    t.write_arrow(pa.table({"k": [5, 3, 9, 3], "v": ["x", "y", "z", None],
                            "_row_kind": ["+I", "+I", "-D", "-U"]}))
    (split,) = t.plan()
    (f,) = split.files
    data = pq.ParquetFile(f"{t.path}/bucket-0/{f.file_name}").read()
    assert data.column_names == ["_KEY_k", SEQUENCE_NUMBER, VALUE_KIND, "k", "v"]
    assert data.column("_KEY_k").to_pylist() == [3, 5, 9]  # sorted, one row per key
    assert data.column(VALUE_KIND).to_pylist() == [1, 0, 3]
    assert f.row_count == 3 and f.delete_row_count == 2 and f.level == 0 and f.file_source == 0
    assert (f.min_sequence_number, f.max_sequence_number) == (0, 3)
    assert deserialize_row(f.min_key, t.schema.types_of(["k"])) == [3]
    assert deserialize_row(f.max_key, t.schema.types_of(["k"])) == [9]
    assert f.file_size == (tmp_path / "wh" / "db.db" / "t" / "bucket-0" / f.file_name).stat().st_size
    assert f.file_name.startswith("data-") and f.file_name.endswith("-0.parquet")


def test_files_roll_at_the_target_size(tmp_path) -> None:
    t = _table(tmp_path, **{"target-file-size": "64 kb"})
    n = 20_000
    t.write_arrow(pa.table({"k": pa.array(range(n), pa.int64()), "v": [f"value-{i:08d}" for i in range(n)]}))
    (split,) = t.plan()
    assert len(split.files) > 3
    bounds = [(deserialize_row(f.min_key, t.schema.types_of(["k"]))[0],
               deserialize_row(f.max_key, t.schema.types_of(["k"]))[0]) for f in split.files]
    bounds.sort()
    assert all(a[1] < b[0] for a, b in zip(bounds, bounds[1:], strict=False)), "rolled files cover disjoint key ranges"
    assert sum(f.row_count for f in split.files) == n
    assert t.to_arrow().num_rows == n
