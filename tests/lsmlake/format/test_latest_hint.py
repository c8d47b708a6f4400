"""A LATEST hint is only a hint: one that names a snapshot that does not exist (its snapshot deleted by a drop that
raced the hint's write, a rollback that crashed before rewriting it) must not stop reads or commits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog


def _table(tmp_path: Path):  # type: ignore[no-untyped-def]
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    for i in range(3):
        t.write_arrow(pa.table({"k": pa.array([i], pa.int64()), "v": [f"v{i}"]}))
    return cat, t


def test_a_hint_naming_a_missing_snapshot_is_not_trusted(tmp_path: Path) -> None:
    cat, t = _table(tmp_path)
    t.snapshots.write_hint("LATEST", 7)  # snapshots 1..3 exist
    fresh = cat.get_table("db.t")
    assert fresh.snapshots.latest_id() == 3
    latest = fresh.snapshots.latest()
    assert latest is not None and latest.id == 3


def test_a_commit_goes_on_after_a_hint_naming_a_missing_snapshot(tmp_path: Path) -> None:
    cat, t = _table(tmp_path)
    t.snapshots.write_hint("LATEST", 7)
    fresh = cat.get_table("db.t")
    fresh.write_arrow(pa.table({"k": pa.array([10], pa.int64()), "v": ["after"]}))
    assert fresh.snapshots.latest().id == 4  # type: ignore[union-attr]
    assert sorted(cat.get_table("db.t").to_arrow().column("k").to_pylist()) == [0, 1, 2, 10]
