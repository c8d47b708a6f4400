"""What a commit and a plan read: the manifests that can hold their partitions and buckets, not the whole table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.binary_row import serialize_row
from lsmlake.format.manifest import ManifestStore
from lsmlake.format.types import parse_type
from lsmlake.table.file_store_table import FileStoreTable

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False),
                    pa.field("v", pa.int64())])


def _table(tmp_path: Any, **options: str) -> FileStoreTable:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    o = {"bucket": "2", "write-only": "true", "manifest.merge-min-count": "100000"}
    o.update(options)
    return cat.create_table("db.t", "id BIGINT NOT NULL, p STRING NOT NULL, v BIGINT", partition_keys=["p"],
                            primary_keys=["id", "p"], options=o)


def _rows(partition: str, ids: list[int], v: int = 0) -> pa.Table:
    return pa.table({"id": ids, "p": [partition] * len(ids), "v": [v] * len(ids)}, schema=SCHEMA)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the manifests read (decoded, or taken from the cache of decoded ones) from here on: whole, or
    looked into by a read of some partitions or buckets."""
    names: list[str] = []
    real = ManifestStore.read_manifest

    def read_manifest(self: ManifestStore, name: str) -> Any:
        names.append(name)
        return real(self, name)

    monkeypatch.setattr(ManifestStore, "read_manifest", read_manifest)
    monkeypatch.setattr(ManifestStore, "opened", lambda self, name: names.append(name), raising=False)
    yield names


def _manifests_holding(t: FileStoreTable, partition: str) -> set[str]:
    snap = t.latest_snapshot()
    assert snap is not None
    part = serialize_row([partition], [parse_type("STRING")])
    return {m.file_name for m in t.manifests.snapshot_manifests(snap.base_manifest_list, snap.delta_manifest_list)
            if any(e.partition == part for e in t.manifests.read_manifest(m.file_name))}


@pytest.mark.parametrize("partitions", [10, 40])
def test_a_one_bucket_write_opens_only_the_manifests_of_its_partition(tmp_path: Any, opened: list[str],
                                                                      partitions: int) -> None:
    """A writer restores the sequence numbers of the bucket it writes from the manifests that can hold it: as many
    as there are for that partition, whatever the number of partitions (the whole table was read: fails before)."""
    t = _table(tmp_path)
    for i in range(partitions):
        t.write_arrow(_rows(f"p{i:03d}", [1, 2, 3, 4]))
    t.write_arrow(_rows("p005", [5, 6, 7, 8], v=1))
    holding = _manifests_holding(t, "p005")
    assert len(holding) == 2
    opened.clear()
    w = t.new_write()
    w.write(_rows("p005", [9]))
    messages = w.prepare_commit()
    assert set(opened) == holding  # one flush, both manifests of its partition, once each
    assert len(opened) == 2
    opened.clear()
    t.new_commit().commit(messages)
    assert opened == []  # an APPEND reads no manifest (the base list keeps the previous ones by name)


def test_restored_sequence_numbers_are_those_of_the_bucket(tmp_path: Any) -> None:
    """The pruned restore finds each bucket's largest sequence number, as a read of the whole table does."""
    t = _table(tmp_path)
    for r in range(3):
        for i in range(6):
            t.write_arrow(_rows(f"p{i:03d}", list(range(r * 10, r * 10 + 3 + i)), v=r))
    expected: dict[tuple[bytes, int], int] = {}
    for s in t.plan():
        expected[(s.partition, s.bucket)] = max(f.max_sequence_number for f in s.files)
    restore = t.max_sequence_restorer()
    assert {k: restore(*k) for k in expected} == expected
    assert t.max_sequence_restorer().many(list(expected)) == expected
    assert restore(serialize_row(["absent"], [parse_type("STRING")]), 0) == -1


def test_a_one_partition_scan_opens_only_the_manifests_that_can_hold_it(tmp_path: Any, opened: list[str]) -> None:
    """Planning with a partition filter prunes manifests by the manifest list's partition statistics and plans
    the same splits as a full plan filtered (the whole table was read: fails before)."""
    t = _table(tmp_path)
    for i in range(30):
        t.write_arrow(_rows(f"p{i:03d}", [1, 2, 3]))
    t.write_arrow(_rows("p007", [4, 5], v=1))
    holding = _manifests_holding(t, "p007")
    full = [s for s in t.new_scan().plan() if s.partition_values == ("p007",)]
    opened.clear()
    splits = t.new_scan({"p": "p007"}).plan()
    assert set(opened) == holding and len(opened) == len(holding) == 2
    assert splits == full and splits
    opened.clear()
    ranged = t.new_scan([("p", ">=", "p028")]).plan()
    assert {s.partition_values for s in ranged} == {("p028",), ("p029",)}
    assert len(opened) == 2


def test_a_compaction_commit_checks_only_the_buckets_it_changes(tmp_path: Any, opened: list[str]) -> None:
    """A commit that deletes files checks them against the live files of their buckets only (the whole table was
    read: fails before); a file another commit deleted meanwhile is still a conflict."""
    from lsmlake.errors import CommitConflictError
    from lsmlake.table.write import CommitMessage

    t = _table(tmp_path)
    for i in range(20):
        t.write_arrow(_rows(f"p{i:03d}", [1, 2, 3, 4]))
    holding = _manifests_holding(t, "p005")
    splits = [s for s in t.plan() if s.partition_values == ("p005",)]
    messages = [CommitMessage(s.partition, s.bucket, s.total_buckets, deleted_files=list(s.files)) for s in splits]
    opened.clear()
    t.new_commit().commit(messages)
    assert set(opened) == holding and len(opened) == 1
    with pytest.raises(CommitConflictError, match="no longer live"):
        t.new_commit().commit(messages)
