"""Snapshot expiration and orphan cleanup delete only what no retained snapshot reaches."""

from __future__ import annotations

import os

import pyarrow as pa
from lsmlake.catalog import FileSystemCatalog
from lsmlake.expire import expire_snapshots, referenced_files, remove_orphan_files


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
