"""`SnapshotManager.at_time`: the snapshot a reader sees at a point in time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.snapshot import SnapshotManager


def test_at_time_answers_the_last_snapshot_committed_at_or_before(tmp_path: Path) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    table = cat.create_table("db.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    table.write_arrow(pa.table({"id": pa.array([1], pa.int64())}))
    first = table.snapshots.latest()
    assert first is not None
    snapshots = SnapshotManager(table.io, str(tmp_path / "copy"))
    for sid, at in ((1, 1_000), (2, 2_000), (3, 2_000), (4, 1_500)):  # 4: a clock that went back
        assert snapshots.publish(dataclasses.replace(first, id=sid, time_millis=at))
    assert snapshots.at_time(999) is None
    found = [(t, s.id if (s := snapshots.at_time(t)) is not None else None) for t in (1_000, 1_499, 1_500, 5_000)]
    assert found == [(1_000, 1), (1_499, 1), (1_500, 4), (5_000, 4)]
