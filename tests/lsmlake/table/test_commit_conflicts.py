"""Conflict detection covers everything a commit was planned against: data files, their deletion vectors, the
HASH index; a delete that lost to a compaction is redone, a compaction that lost is refused (and re-planned by
its caller); an index manifest sent whole may change nothing but what the commit's changes allow."""

from __future__ import annotations

import threading

import pyarrow as pa
import pypaimon
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitConflictError, InvalidInputError
from lsmlake.format.index_manifest import DELETION_VECTORS
from lsmlake.table.compact import commit_compaction, compact_buckets, compact_table
from lsmlake.table.file_store import FileStore
from tests.support.pypaimon_io import write


def _append_dv_table(tmp_path, commits: int = 6, rows: int = 400):
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, g INT NOT NULL",
                         options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    for c in range(commits):
        ids = pa.array(range(c * rows, (c + 1) * rows), pa.int64())
        t.write_arrow(pa.table({"id": ids, "g": pa.array([i % 6 for i in range(c * rows, (c + 1) * rows)],
                                                         pa.int32())}))
    return cat, t


def _groups(t) -> dict[int, int]:
    out: dict[int, int] = {}
    for g in t.to_arrow(projection=["g"]).column("g").to_pylist():
        out[g] = out.get(g, 0) + 1
    return out


def test_a_compaction_planned_before_a_delete_cannot_bring_its_rows_back(tmp_path) -> None:
    """The reproduction, one interleaving: compaction planned, delete committed, compaction committed."""
    cat, t = _append_dv_table(tmp_path)
    _, planned = compact_buckets(t, full=True)
    assert planned
    assert t.delete_where({"g": 1}) is not None
    with pytest.raises(CommitConflictError, match="deletion vectors"):
        commit_compaction(t, planned)
    t = cat.get_table("db.t")
    assert 1 not in _groups(t)
    # re-planned on the new snapshot, the compaction keeps the delete
    assert compact_table(t, full=True).snapshot_id is not None
    assert 1 not in _groups(cat.get_table("db.t"))
    assert sum(_groups(cat.get_table("db.t")).values()) == 6 * 400 - 400


def test_a_delete_that_lost_to_a_compaction_is_redone_on_the_new_files(tmp_path, monkeypatch) -> None:
    cat, t = _append_dv_table(tmp_path)
    t.delete_where({"g": 2})  # the bucket has a vector file: the compaction replaces it
    planned_once = []
    original = FileStore.delete_messages

    def compact_after_planning(self, *args, **kwargs):
        messages = original(self, *args, **kwargs)
        if not planned_once:
            planned_once.append(True)
            assert compact_table(cat.get_table("db.t"), full=True).snapshot_id is not None
        return messages

    monkeypatch.setattr(FileStore, "delete_messages", compact_after_planning)
    assert t.delete_where({"g": 3}) is not None
    groups = _groups(cat.get_table("db.t"))
    assert 2 not in groups and 3 not in groups
    assert sum(groups.values()) == 6 * 400 - 2 * 400


def _race_deletes_with_compaction(cat) -> list[BaseException]:
    """Six deletes while another thread compacts the table fully, over and over; the compactor's errors."""
    errors: list[BaseException] = []
    done = threading.Event()

    def compact() -> None:
        try:
            while not done.is_set():
                try:
                    compact_table(cat.get_table("db.t"), full=True)
                except CommitConflictError:
                    pass  # lost to a delete: the next round plans again
        except BaseException as e:
            errors.append(e)

    th = threading.Thread(target=compact)
    th.start()
    try:
        for g in range(6):
            cat.get_table("db.t").delete_where({"g": g})
    finally:
        done.set()
        th.join(timeout=120)
    return errors


def test_deletes_racing_a_full_compaction_all_succeed_and_stay_deleted(tmp_path) -> None:
    """The reproduction as reported: one thread compacts fully while another deletes six groups."""
    for rnd in range(4):
        cat, _ = _append_dv_table(tmp_path / f"r{rnd}", commits=25, rows=200)
        assert _race_deletes_with_compaction(cat) == []
        assert _groups(cat.get_table("db.t")) == {}, f"round {rnd}: deleted rows are readable again"


def _dynamic_table(tmp_path):
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.d", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                         options={"bucket": "-1", "dynamic-bucket.target-row-num": "2"})
    t.write_arrow(pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "v": ["a", "b", "c", "d", "e"]}))
    return cat, t


def test_an_index_manifest_sent_whole_may_not_drop_hash_entries(tmp_path) -> None:
    """Reproduction 3: a REST commit replacing the index manifest with one that leaves out a bucket's HASH file."""
    from lsmlake.catalog.commit.snapshot import check_index_manifest

    cat, t = _dynamic_table(tmp_path)
    latest = t.snapshots.latest()
    entries = t.indexes.read(latest.index_manifest)
    assert len({e.bucket for e in entries if e.index_type == "HASH"}) >= 2
    dropped = t.indexes.write(entries[1:])
    with pytest.raises(InvalidInputError, match="HASH"):
        check_index_manifest(t, latest, dropped, [])


def test_an_index_manifest_sent_whole_may_not_drop_deletion_vectors(tmp_path) -> None:
    from lsmlake.catalog.commit.snapshot import check_index_manifest

    cat, t = _append_dv_table(tmp_path)
    t.delete_where({"g": 1})
    latest = t.snapshots.latest()
    entries = t.indexes.read(latest.index_manifest)
    assert [e.index_type for e in entries] == [DELETION_VECTORS]
    empty = t.indexes.write([])
    with pytest.raises(InvalidInputError, match="deleted rows"):
        check_index_manifest(t, latest, empty, [])


def _snapshot_with_index(t, index_manifest: str):
    """The next snapshot of `t` as a REST client builds it: the latest's files, no data change, `index_manifest`."""
    import dataclasses
    import uuid

    latest = t.snapshots.latest()
    base, base_size = t.manifests.write_list(
        t.manifests.snapshot_manifests(latest.base_manifest_list, latest.delta_manifest_list))
    delta, delta_size = t.manifests.write_list([])
    return dataclasses.replace(latest, id=latest.id + 1, base_manifest_list=base, base_manifest_list_size=base_size,
                               delta_manifest_list=delta, delta_manifest_list_size=delta_size, commit_kind="APPEND",
                               commit_user="rest-client", commit_identifier=latest.id + 1, delta_record_count=0,
                               changelog_manifest_list=None, changelog_manifest_list_size=None,
                               changelog_record_count=None, index_manifest=index_manifest, properties=None,
                               uuid=str(uuid.uuid4()))


@pytest.mark.parametrize("kind", ["HASH", DELETION_VECTORS])
def test_the_rest_commit_refuses_an_index_manifest_that_drops_entries(tmp_path, kind) -> None:
    """Reproduction 3 through the catalog's REST commit: dropping a bucket's HASH file (a key would get a second
    bucket) or a deletion-vector file (deleted rows come back) is refused, and nothing is published."""
    from lsmlake.catalog.commit.snapshot import SnapshotCommitRequest
    from tests.support.local_server import local_server

    with local_server(str(tmp_path / "lake")) as local:
        cat = FileSystemCatalog(local.warehouse)
        cat.create_database("db")
        if kind == "HASH":
            t = cat.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                                 options={"bucket": "-1", "dynamic-bucket.target-row-num": "2"})
            t.write_arrow(pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "v": ["a", "b", "c", "d", "e"]}))
        else:
            t = cat.create_table("db.t", "id BIGINT NOT NULL, g INT NOT NULL",
                                 options={"bucket": "-1", "deletion-vectors.enabled": "true"})
            t.write_arrow(pa.table({"id": pa.array(range(10), pa.int64()), "g": pa.array([i % 2 for i in range(10)],
                                                                                          pa.int32())}))
            t.delete_where({"g": 1})
        t = cat.get_table("db.t")
        latest = t.snapshots.latest()
        entries = [e for e in t.indexes.read(latest.index_manifest)]
        assert any(e.index_type == kind for e in entries)
        kept = [e for e in entries if e.index_type != kind] + [e for e in entries if e.index_type == kind][1:]
        snap = _snapshot_with_index(t, t.indexes.write(kept))
        with pytest.raises(InvalidInputError):
            local.server._operations.writes.commit_snapshot(SnapshotCommitRequest("db.t", snap))
        assert cat.get_table("db.t").snapshots.latest_id() == latest.id


def test_an_index_manifest_sent_whole_is_compared_by_content(tmp_path) -> None:
    """A vector with as many positions but other ones, or a HASH file with as many keys but other ones, loses
    deletes or keys: refused; a vector with more positions is a delete and is accepted."""
    import dataclasses

    import numpy as np
    from pyroaring import BitMap

    from lsmlake.catalog.commit.snapshot import check_index_manifest
    from lsmlake.format import deletion_vector
    from lsmlake.table.read import load_vectors

    cat, t = _append_dv_table(tmp_path, commits=2, rows=20)
    t.delete_where({"g": 1})
    latest = t.snapshots.latest()
    (dv,) = t.indexes.read(latest.index_manifest)
    vectors = load_vectors(t.io, t.path, dv)

    def with_vectors(vs):
        data, ranges = deletion_vector.serialize(vs)
        name = t.indexes.write_index_file(data)
        return t.indexes.write([dataclasses.replace(dv, file_name=name, file_size=len(data), row_count=len(ranges),
                                                    dv_ranges=tuple(ranges))])

    moved = {n: BitMap([p + 1 for p in bm]) for n, bm in vectors.items()}  # as many positions, other ones
    with pytest.raises(InvalidInputError, match="lose positions"):
        check_index_manifest(t, latest, with_vectors(moved), [])
    more = {n: BitMap(bm) | BitMap([0]) for n, bm in vectors.items()}
    check_index_manifest(t, latest, with_vectors(more), [])

    cat2, d = _dynamic_table(tmp_path / "d")
    latest = d.snapshots.latest()
    entries = d.indexes.read(latest.index_manifest)
    h = entries[0]
    other = np.arange(h.row_count, dtype=">i4") + 12345  # as many keys, none of the old ones
    name = d.indexes.write_index_file(other.tobytes())
    swapped = [dataclasses.replace(h, file_name=name)] + entries[1:]
    with pytest.raises(InvalidInputError, match="leaves out keys"):
        check_index_manifest(d, latest, d.indexes.write(swapped), [])


def _append_while_deleting(tmp_path, monkeypatch, group: int, times: int, by_pypaimon: bool = False):
    """A table with one row of group 0, and another writer (lsmlake, or pypaimon with `by_pypaimon`) that appends a
    row of `group` while each of the first `times` attempts of a delete runs; (the catalog, the table, the attempts
    made so far)."""
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, g INT NOT NULL",
                         options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    t.write_arrow(pa.table({"id": pa.array([0], pa.int64()), "g": pa.array([0], pa.int32())}))
    other = cat.get_table("db.t")
    if by_pypaimon:
        other = _PypaimonAppender(pypaimon.CatalogFactory.create({"warehouse": str(tmp_path / "wh")}).get_table("db.t"))
    original = FileStore.delete_messages
    attempts: list[int] = []

    def append_while_deleting(self, *args, **kwargs):
        messages = original(self, *args, **kwargs)
        attempts.append(1)
        if len(attempts) <= times:
            other.write_arrow(pa.table({"id": pa.array([len(attempts)], pa.int64()),
                                        "g": pa.array([group], pa.int32())}))
        return messages

    monkeypatch.setattr(FileStore, "delete_messages", append_while_deleting)
    return cat, t, attempts


class _PypaimonAppender:
    """pypaimon's table behind the `write_arrow` of lsmlake's."""

    def __init__(self, table) -> None:
        self.table = table

    def write_arrow(self, data: pa.Table) -> None:
        write(self.table, data.cast(pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                pa.field("g", pa.int32(), nullable=False)])))


def test_a_delete_is_not_starved_by_appends_its_predicate_cannot_match(tmp_path, monkeypatch) -> None:
    """Another writer appends rows of group 1 while every attempt of a delete of group 0 runs: those files'
    statistics exclude the predicate, so they do not conflict with it (before, the delete gave up after
    `commit.max-retries` redos)."""
    cat, t, attempts = _append_while_deleting(tmp_path, monkeypatch, group=1, times=100)
    assert t.delete_where({"g": 0}) is not None
    assert len(attempts) == 1
    assert _groups(cat.get_table("db.t")) == {1: 1}


def test_a_delete_still_conflicts_with_appends_its_predicate_may_match(tmp_path, monkeypatch) -> None:
    cat, t, attempts = _append_while_deleting(tmp_path, monkeypatch, group=0, times=1)
    assert t.delete_where({"g": 0}) is not None
    assert len(attempts) == 2  # redone, and the redo deleted the row appended meanwhile too
    assert _groups(cat.get_table("db.t")) == {}


def test_a_delete_is_not_starved_by_appends_without_statistics_that_hold_no_matching_row(tmp_path,
                                                                                       monkeypatch) -> None:
    """pypaimon writes its data files without value statistics, so they cannot rule the predicate out: the delete
    reads what such a file holds before it calls it a conflict (before, every pypaimon commit during an attempt
    made the delete redo, and a steady pypaimon writer made it give up after `commit.max-retries` redos)."""
    cat, t, attempts = _append_while_deleting(tmp_path, monkeypatch, group=1, times=100, by_pypaimon=True)
    assert t.delete_where({"g": 0}) is not None
    assert len(attempts) == 1
    assert _groups(cat.get_table("db.t")) == {1: 1}


def test_a_delete_conflicts_with_an_append_without_statistics_that_holds_a_matching_row(tmp_path,
                                                                                       monkeypatch) -> None:
    cat, t, attempts = _append_while_deleting(tmp_path, monkeypatch, group=0, times=1, by_pypaimon=True)
    assert t.delete_where({"g": 0}) is not None
    assert len(attempts) == 2  # redone, and the redo deleted the row pypaimon appended meanwhile too
    assert _groups(cat.get_table("db.t")) == {}
