"""Snapshot expiration and orphan cleanup delete only what no retained snapshot reaches."""

from __future__ import annotations

import os

import pyarrow as pa

from lsmlake.catalog.expire import expire_snapshots, remove_orphan_files
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reachability import referenced_files


def _table(tmp_path, **options):
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    opts = {"bucket": "2"}
    opts.update(options)
    return cat.create_table("db.t", "k BIGINT NOT NULL, p STRING NOT NULL, v BIGINT", partition_keys=["p"],
                            primary_keys=["k", "p"], options=opts)


def _files(root) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


def test_expire_keeps_retained_snapshots_readable(tmp_path) -> None:
    t = _table(tmp_path)
    expected = {}
    for i in range(12):
        t.write_arrow(pa.table({"k": [i % 4, 10 + i], "p": ["a", "b"], "v": [i, i]}))
        expected[i + 1] = sorted(map(tuple, (r.values() for r in t.to_arrow().to_pylist())))
    # Overwrite partition a: the files it replaces become deletable once snapshot 12 expires.
    t.overwrite_arrow(pa.table({"k": [99], "p": ["a"], "v": [1]}))
    expected[13] = sorted(map(tuple, (r.values() for r in t.to_arrow().to_pylist())))
    before = _files(t.path)
    res = expire_snapshots(t, retain_min=3, retain_max=100, time_retained_ms=0)
    assert res.expired_snapshots == list(range(1, 11))
    assert t.snapshots.ids() == [11, 12, 13]
    assert t.snapshots.earliest_id() == 11
    for sid in (11, 12, 13):
        got = sorted(map(tuple, (r.values() for r in t.to_arrow(sid).to_pylist())))
        assert got == expected[sid]
    after = _files(t.path) - {os.path.join(t.path, "snapshot", "EARLIEST")}
    assert after < before
    # Nothing a retained snapshot reaches was deleted, and every deleted file is unreachable.
    reachable = referenced_files(t, t.snapshots.snapshots())
    assert reachable <= after
    assert not (before - after) & reachable
    # Files of partition a that only snapshots 1..12 reached are still there until 12 expires.
    res2 = expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0)
    assert res2.expired_snapshots == [11, 12]
    assert res2.deleted_data_files > 0
    assert sorted(map(tuple, (r.values() for r in t.to_arrow().to_pylist()))) == expected[13]
    data_left = {f for f in _files(t.path) if f.endswith(".parquet")}
    assert data_left == {f for f in referenced_files(t, t.snapshots.snapshots()) if f.endswith(".parquet")}


def test_expire_respects_min_max_and_age(tmp_path) -> None:
    t = _table(tmp_path)
    for i in range(8):
        t.write_arrow(pa.table({"k": [i], "p": ["a"], "v": [i]}))
    snaps = t.snapshots.snapshots()
    # Everything young: nothing expires while under max.
    assert expire_snapshots(t, retain_min=2, retain_max=100, time_retained_ms=3_600_000).expired_snapshots == []
    # Beyond max, snapshots expire whatever their age.
    assert expire_snapshots(t, retain_min=2, retain_max=5, time_retained_ms=3_600_000).expired_snapshots == [1, 2, 3]
    # By age: snapshots older than the cut-off go, but min is always kept.
    now = snaps[-1].time_millis + 10_000_000
    assert expire_snapshots(t, retain_min=2, retain_max=100, time_retained_ms=1000, now_ms=now).expired_snapshots \
        == [4, 5, 6]
    assert t.snapshots.ids() == [7, 8]


def test_remove_orphan_files_with_age_guard(tmp_path) -> None:
    t = _table(tmp_path)
    t.write_arrow(pa.table({"k": [1, 2], "p": ["a", "a"], "v": [1, 2]}))
    # An aborted write: files on disk that no snapshot references.
    w = t.new_write()
    w.write(pa.table({"k": [3], "p": ["a"], "v": [3]}))
    orphan_data = {f for f in _files(t.path) if f.endswith(".parquet")} - \
        {f for f in referenced_files(t, t.snapshots.snapshots())}
    assert len(orphan_data) == 1
    stray = os.path.join(t.path, "manifest", "manifest-stray-0")
    with open(stray, "wb") as f:
        f.write(b"x")
    # Young orphans are protected by the age guard.
    assert remove_orphan_files(t).deleted == []
    res = remove_orphan_files(t, older_than_ms=0, now_ms=None)
    assert set(res.deleted) == orphan_data | {stray}
    assert sorted(r["k"] for r in t.to_arrow().to_pylist()) == [1, 2]
    assert _files(t.path) >= referenced_files(t, t.snapshots.snapshots())


def test_orphan_cleanup_beside_expiration_skips_expired_snapshots(tmp_path) -> None:
    """Expiration deleting a snapshot's manifests while orphan cleanup reads them is not an error.

    The snapshot list is taken first, then expiration runs (as another catalog replica or the
    ExpireSnapshots call would between cleanup's listing and its reads); nothing still reachable
    may be left out of what cleanup keeps.
    """
    t = _table(tmp_path)
    for i in range(6):
        t.write_arrow(pa.table({"k": [i % 3], "p": ["a"], "v": [i]}))
    listed = t.snapshots.snapshots()
    expire_snapshots(t, retain_min=2, retain_max=100, time_retained_ms=0)
    kept = referenced_files(t, listed)
    assert kept == referenced_files(t, t.snapshots.snapshots())
    assert remove_orphan_files(t, older_than_ms=0).deleted == []
    assert sorted(r["v"] for r in t.to_arrow().to_pylist()) == [3, 4, 5]


def test_orphan_cleanup_stops_on_a_broken_snapshot(tmp_path) -> None:
    """A manifest missing from a snapshot that still exists stops cleanup before it deletes anything."""
    t = _table(tmp_path)
    t.write_arrow(pa.table({"k": [1], "p": ["a"], "v": [1]}))
    w = t.new_write()
    w.write(pa.table({"k": [2], "p": ["a"], "v": [2]}))
    w.prepare_commit()  # leaves an unreferenced data file behind
    before = _files(t.path)
    os.remove(os.path.join(t.path, "manifest", t.snapshots.latest().delta_manifest_list))
    try:
        remove_orphan_files(t, older_than_ms=0)
    except LookupError as e:
        assert "not found" in str(e)
    else:
        raise AssertionError("cleanup went on with a snapshot it could not read")
    assert _files(t.path) == before - {os.path.join(t.path, "manifest", t.snapshots.latest().delta_manifest_list)}


# -- tags, consumers, deletions outside the table (issue 19) --------------------------------------
# New lsmlake names are imported inside the tests, so that this file still loads on older code.


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(map(tuple, (r.values() for r in table.to_pylist())))


def _pypaimon(wh: str, ident: str = "db.t"):
    from pypaimon import CatalogFactory

    return CatalogFactory.create({"warehouse": wh}).get_table(ident)


def _pypaimon_read_tag(wh: str, tag: str) -> list[tuple]:
    pt = _pypaimon(wh).copy({"scan.tag-name": tag})
    rb = pt.new_read_builder()
    return _rows(rb.new_read().to_arrow(rb.new_scan().plan().splits()).select(["k", "p", "v"]))


def _lsm_read_tag(t, tag: str) -> list[tuple]:
    """lsmlake reads a tag as Paimon does: the snapshot JSON in `tag/tag-<name>`, not the snapshot file."""
    from lsmlake.format.snapshot import Snapshot

    with open(os.path.join(t.path, "tag", f"tag-{tag}"), "rb") as f:
        snap = Snapshot.from_json(f.read())
    return _rows(t.new_read().read(t.new_scan(snapshot=snap).plan()))


def test_expire_keeps_what_pypaimon_tags_reach(tmp_path) -> None:
    """Tags made by pypaimon 2.1.0 (`table.create_tag`) keep their manifests and data files through
    expiration; the tagged snapshot file itself expires, as in Paimon, and both readers still read the
    tag. Orphan cleanup keeps the tag's files too, and frees them once the tag is deleted."""
    t = _table(tmp_path)
    wh = str(tmp_path / "wh")
    expected = {}
    for i in range(3):
        t.write_arrow(pa.table({"k": [i, 10 + i], "p": ["a", "b"], "v": [i, i]}))
        expected[i + 1] = _rows(t.to_arrow())
    tag_files = {name: referenced_files(t, [t.snapshots.snapshot(sid)]) - {t.snapshots.path(sid)}
                 for name, sid in (("daily", 2), ("weekly", 3))}  # before the tags exist: each on its own
    _pypaimon(wh).create_tag("daily", snapshot_id=2)  # plain snapshot JSON
    _pypaimon(wh).create_tag("weekly", snapshot_id=3, time_retained="7 d")  # with tagCreateTime/tagTimeRetained
    # An untagged write, then replace every file (the tags' and its own), pile up snapshots, and expire
    # all but the latest.
    t.write_arrow(pa.table({"k": [50], "p": ["a"], "v": [50]}))
    t.overwrite_arrow(pa.table({"k": [98, 99], "p": ["a", "b"], "v": [0, 0]}))
    for i in range(3):
        t.write_arrow(pa.table({"k": [100 + i], "p": ["b"], "v": [i]}))
    latest_rows = _rows(t.to_arrow())
    res = expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0)
    assert res.expired_snapshots == list(range(1, 8))
    for name, files in tag_files.items():
        missing = sorted(f for f in files if not os.path.exists(f))
        assert not missing, f"expiration deleted files of tag {name}: {missing}"
    assert res.deleted_data_files == 1  # the untagged write's file: no tag reaches it
    assert not os.path.exists(t.snapshots.path(2)) and not os.path.exists(t.snapshots.path(3))
    for name, sid in (("daily", 2), ("weekly", 3)):
        assert _lsm_read_tag(t, name) == expected[sid]
        assert _pypaimon_read_tag(wh, name) == expected[sid]
    # Orphan cleanup keeps them as well.
    assert referenced_files(t, t.snapshots.snapshots()) >= tag_files["daily"] | tag_files["weekly"]
    remove_orphan_files(t, older_than_ms=0)
    assert _pypaimon_read_tag(wh, "daily") == expected[2] and _lsm_read_tag(t, "weekly") == expected[3]
    # Deleting a tag leaves its files to orphan cleanup (as Paimon does now): only what no other tag reaches.
    assert _pypaimon(wh).delete_tag("daily")
    freed = set(remove_orphan_files(t, older_than_ms=0).deleted)
    assert freed and freed <= tag_files["daily"] - tag_files["weekly"]
    assert _pypaimon_read_tag(wh, "weekly") == expected[3]
    assert _rows(t.to_arrow()) == latest_rows


def test_expire_stops_at_the_slowest_consumer(tmp_path) -> None:
    """A consumer (written by pypaimon's ConsumerManager: `consumer/consumer-<id>`, {"nextSnapshot": N})
    keeps snapshot N and everything after it."""
    from pypaimon.consumer import Consumer

    t = _table(tmp_path)
    for i in range(8):
        t.write_arrow(pa.table({"k": [i % 3], "p": ["a"], "v": [i]}))
    consumers = _pypaimon(str(tmp_path / "wh")).consumer_manager()
    consumers.reset_consumer("fast", Consumer(next_snapshot=7))
    consumers.reset_consumer("slow", Consumer(next_snapshot=4))
    assert expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0).expired_snapshots == [1, 2, 3]
    assert t.snapshots.ids() == [4, 5, 6, 7, 8]
    assert _rows(t.to_arrow(4)) == [(0, "a", 3), (1, "a", 1), (2, "a", 2)]
    # The slow reader moves on: expiration follows it.
    consumers.reset_consumer("slow", Consumer(next_snapshot=6))
    assert expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0).expired_snapshots == [4, 5]
    # Without consumers the usual retention applies again.
    consumers.delete_consumer("slow")
    consumers.delete_consumer("fast")
    assert expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0).expired_snapshots == [6, 7]


def test_a_consumer_older_than_its_expiration_time_holds_nothing(tmp_path) -> None:
    """With `consumer.expiration-time`, a consumer whose file was last written longer ago is ignored and
    deleted by expiration (Paimon deletes expired consumers before it expires snapshots); a fresh one
    still holds its snapshots. The table is made by pypaimon, as a Paimon engine would set the option."""
    from pypaimon import CatalogFactory, Schema
    from pypaimon.consumer import Consumer

    wh = str(tmp_path / "wh")
    pcat = CatalogFactory.create({"warehouse": wh})
    pcat.create_database("db", True)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    pcat.create_table("db.t", Schema.from_pyarrow_schema(schema, primary_keys=["k"], options={
        "bucket": "1", "consumer.expiration-time": "1 h"}), False)
    t = FileSystemCatalog(wh).get_table("db.t")
    for i in range(6):
        t.write_arrow(pa.table({"k": [i % 2], "v": [i]}))
    consumers = _pypaimon(wh).consumer_manager()
    consumers.reset_consumer("gone", Consumer(next_snapshot=2))
    consumers.reset_consumer("live", Consumer(next_snapshot=5))
    gone = os.path.join(t.path, "consumer", "consumer-gone")
    two_hours_ago = os.path.getmtime(gone) - 7200
    os.utime(gone, (two_hours_ago, two_hours_ago))
    res = expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0)
    assert res.expired_snapshots == [1, 2, 3, 4]  # 'gone' would have kept 2 on; 'live' keeps 5
    assert not os.path.exists(gone)
    assert consumers.consumers() == {"live": 5}
    assert res.expired_consumers == ["gone"]


def _commit_with_external_file(t, outside_dir) -> str:
    """Commit a data file whose manifest entry names an `external_path` outside the table and outside any
    external root, as a table written by another engine (or before its roots were changed) can hold."""
    import dataclasses
    import shutil

    from lsmlake.format.data_file_writer import bucket_dir

    w = t.new_write()
    w.write(pa.table({"k": [1], "p": ["a"], "v": [1]}))
    (msg,) = w.prepare_commit()
    f = msg.new_files[0]
    inside = os.path.join(bucket_dir(t.path, t.schema.partition_dir(["a"]), msg.bucket), f.file_name)
    os.makedirs(outside_dir, exist_ok=True)
    outside = os.path.join(str(outside_dir), f.file_name)
    shutil.move(inside, outside)
    msg = dataclasses.replace(msg, new_files=[dataclasses.replace(f, external_path=outside)])
    t.commit_messages([msg])
    return outside


def test_expiration_never_deletes_outside_the_table(tmp_path, caplog) -> None:
    """A replaced file whose `external_path` lies outside the table folder and its external roots is left
    in place; the refusal is logged once (a warning with the count and an example), not raised."""
    t = _table(tmp_path)
    outside = _commit_with_external_file(t, tmp_path / "elsewhere")
    t.overwrite_arrow(pa.table({"k": [2], "p": ["a"], "v": [2]}))  # replaces the external file
    t.overwrite_arrow(pa.table({"k": [3], "p": ["a"], "v": [3]}))
    with caplog.at_level("WARNING", logger="lsmlake.catalog.expire"):
        res = expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0)
    assert res.expired_snapshots == [1, 2]
    assert os.path.exists(outside), "expiration deleted a file outside the table"
    assert res.deleted_data_files == 1  # snapshot 2's file, inside the table
    assert res.refused_deletions == 1
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "1 file(s)" in warnings[0].getMessage() and outside in warnings[0].getMessage()
    assert _rows(t.to_arrow()) == [(3, "a", 3)]


def test_orphan_cleanup_never_deletes_outside_the_table(tmp_path, caplog) -> None:
    """A listing that names a file outside the table folder (a store whose listing is not confined to the
    folder) never leads orphan cleanup to delete it; the refusal is logged once."""
    from lsmlake.fs.file_io import FileInfo

    t = _table(tmp_path)
    t.write_arrow(pa.table({"k": [1], "p": ["a"], "v": [1]}))
    stray = tmp_path / "wh" / "db.db" / "t2" / "data.parquet"  # a sibling table sharing the name prefix
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"x")
    real_list = t.io.list

    def leaky_list(path, recursive=False):
        out = real_list(path, recursive)
        if recursive and path == t.path:
            out.append(FileInfo(str(stray), stray.name, 1, 0, False))
        return out

    t.io.list = leaky_list
    with caplog.at_level("WARNING", logger="lsmlake.catalog.expire"):
        res = remove_orphan_files(t, older_than_ms=0)
    assert stray.exists(), "orphan cleanup deleted a file outside the table"
    assert str(stray) not in res.deleted
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and str(stray) in warnings[0].getMessage()


def test_deletions_under_external_roots_and_on_object_stores_go_ahead(tmp_path) -> None:
    """The guard refuses nothing it should allow: a file under a `data-file.external-paths` root, and the
    `bucket/key` names of an object store's FileIO."""
    from pyarrow.fs import _MockFileSystem

    root = tmp_path / "ext"
    t = _table(tmp_path, **{"data-file.external-paths": str(root)})
    external = _commit_with_external_file(t, root / "db" / "t")
    t.overwrite_arrow(pa.table({"k": [2], "p": ["a"], "v": [2]}))
    res = expire_snapshots(t, retain_min=1, retain_max=100, time_retained_ms=0)
    assert not os.path.exists(external) and res.refused_deletions == 0 and res.deleted_data_files == 1

    cat = FileSystemCatalog("bucket/warehouse", filesystem=_MockFileSystem())
    cat.create_database("db")
    s = cat.create_table("db.s", "k BIGINT NOT NULL, v BIGINT", primary_keys=["k"], options={"bucket": "1"})
    s.write_arrow(pa.table({"k": [1], "v": [1]}))
    s.overwrite_arrow(pa.table({"k": [2], "v": [2]}))
    res = expire_snapshots(s, retain_min=1, time_retained_ms=0)
    assert res.expired_snapshots == [1] and res.deleted_data_files == 1 and res.refused_deletions == 0
    w = s.new_write()
    w.write(pa.table({"k": [3], "v": [3]}))  # an uncommitted file: an orphan
    orphans = remove_orphan_files(s, older_than_ms=0)
    assert len(orphans.deleted) == 1 and orphans.refused_deletions == 0


def test_an_expire_pass_catches_up_in_batches_within_its_bounds(tmp_path) -> None:
    """`ExpirePass` repeats batches of at most `snapshot.expire.limit` until nothing more is expirable,
    taking the lock once per batch, and stops early at its batch or time bound (the next pass goes on)."""
    from contextlib import contextmanager

    from lsmlake.catalog.expire import ExpirePass

    t = _table(tmp_path, **{"snapshot.expire.limit": "4", "snapshot.num-retained.min": "2",
                            "snapshot.time-retained": "0 ms"})
    for i in range(20):
        t.write_arrow(pa.table({"k": [i % 3], "p": ["a"], "v": [i]}))
    locks = []

    @contextmanager
    def lock():
        locks.append(t.snapshots.earliest_id())
        yield

    bounded = ExpirePass(t, batch_lock=lock, max_batches=2)
    assert bounded.run().expired_snapshots == list(range(1, 9))
    assert (bounded.batches, bounded.caught_up, locks) == (2, False, [1, 5])
    ticks = iter(range(100))
    timed = ExpirePass(t, budget_s=1.5, clock=lambda: float(next(ticks)))  # each batch "takes" a second
    assert timed.run().expired_snapshots == list(range(9, 17)) and not timed.caught_up
    rest = ExpirePass(t)
    assert rest.run().expired_snapshots == [17, 18] and rest.caught_up and rest.batches == 1
    assert t.snapshots.ids() == [19, 20]
    assert _rows(t.to_arrow()) == [(0, "a", 18), (1, "a", 19), (2, "a", 17)]


def test_files_reached_since_a_snapshot_finds_newer_files_in_retained_snapshots_and_nothing_older(tmp_path) -> None:
    """What a rollback protects (`files_reached_since`): a file written after the plan's snapshot is found while a
    retained snapshot reaches it, through its delta, or through the oldest retained snapshot once the snapshot that
    added it has expired; the files older snapshots added are not looked for."""
    from lsmlake.catalog.reachability import files_reached_since
    from lsmlake.table.compact import compact_table

    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, v BIGINT", primary_keys=["id"], options={"bucket": "1"})

    def commit(i: int) -> set[str]:
        t.write_arrow(pa.table({"id": pa.array([i], pa.int64()), "v": pa.array([i], pa.int64())}))
        return {f.file_name for s in t.plan() for f in s.files}

    old = commit(0) | commit(1)
    base = t.snapshots.latest_id()
    assert files_reached_since(t, base) == set()
    new = commit(2) - old
    assert files_reached_since(t, base) == new
    assert compact_table(t, full=True).snapshot_id is not None  # the compaction deletes them: still reached
    compacted = {f.file_name for s in t.plan() for f in s.files}
    assert files_reached_since(t, base) == new | compacted
    for i in range(3, 6):
        commit(i)
    latest = t.snapshots.latest_id()
    expire_snapshots(t, retain_min=1, retain_max=1)
    assert t.snapshots.earliest_id() == latest
    live = {f.file_name for s in t.plan() for f in s.files}
    assert files_reached_since(t, base) == live  # the oldest retained snapshot's live files, the rest expired
